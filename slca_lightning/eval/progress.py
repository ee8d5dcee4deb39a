"""Progress of a long evaluation: entries done of the total, time elapsed, time left.

Every evaluator (in-domain, BFCL, τ²) reports through :func:`progress` while it runs, so a
run of many minutes is never silent::

    with progress("bfcl", len(entries)) as update:
        for batch in batches:
            ...
            update(len(batch))

On a terminal (``stream.isatty()``) it draws a tqdm bar; elsewhere (CI logs, files,
``nohup``) it writes plain lines such as::

    bfcl: 0/60 entries, started
    bfcl: 12/60 entries (20%), 1m05s elapsed, ~4m20s left
    bfcl: 60/60 entries (100%), 5m31s elapsed, done

one at the start, then one when another ``every_fraction`` of the total is done or
``every_s`` seconds have passed since the last line, whichever comes first, and one at the
end, so a log gets at most one line per 10 % or 30 s (the defaults). A heartbeat (a daemon
thread) writes the current line when nothing was written for ``every_s`` seconds, so a
single long batch still shows the clock moving. The estimate of the time left is the mean
time per entry so far times the entries left.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

__all__ = ["Update", "format_seconds", "progress"]

#: What :func:`progress` yields: ``update(n)`` counts ``n`` more entries done.
Update = Callable[[int], None]


def format_seconds(seconds: float) -> str:
    """``65`` → ``"1m05s"``, ``3725`` → ``"1h02m"``, ``9`` → ``"9s"``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


@contextmanager
def progress(
    label: str,
    total: int,
    unit: str = "entries",
    *,
    enabled: bool = True,
    stream: IO[str] | None = None,
    every_s: float = 30.0,
    every_fraction: float = 0.1,
    bar: bool | None = None,
    heartbeat: bool = True,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[Update]:
    """Report ``total`` entries' progress while the ``with`` block runs; yields ``update``.

    Args:
        label: what runs (the line's prefix), e.g. ``"bfcl"`` or ``"tau2 airline"``.
        total: entries to do.
        unit: what an entry is called in the line (``"entries"``, ``"tasks"``, …).
        enabled: False: report nothing (e.g. on ranks other than zero).
        stream: where to write (default: ``sys.stderr`` at the time of writing).
        every_s: the longest quiet time between two lines (seconds).
        every_fraction: a line whenever this share of the total is newly done.
        bar: draw a tqdm bar (None: when ``stream`` is a terminal and tqdm is installed).
        heartbeat: write the current line from a daemon thread after ``every_s`` seconds
            without one (plain lines only).
        clock: the time source (tests give a fake one).

    The final line (or the closed bar) comes when the block ends, normally or not.
    """
    reporter = _Reporter(
        label, total, unit, enabled, stream, every_s, every_fraction, bar, heartbeat, clock
    )
    try:
        yield reporter.update
    finally:
        reporter.close()


class _Reporter:
    """The state behind :func:`progress`: ``done``/``total``, elapsed time, time left."""

    def __init__(
        self,
        label: str,
        total: int,
        unit: str,
        enabled: bool,
        stream: IO[str] | None,
        every_s: float,
        every_fraction: float,
        bar: bool | None,
        heartbeat: bool,
        clock: Callable[[], float],
    ) -> None:
        self.label, self.total, self.unit = label, max(0, int(total)), unit
        self.enabled = enabled
        self.every_s, self.every_fraction = float(every_s), float(every_fraction)
        self.clock = clock
        self.done = 0
        self._stream = stream
        self._start = clock()
        self._last_line_at = self._start
        self._last_step = 0
        self._closed = False
        self._lock = threading.Lock()
        self._bar: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if not enabled:
            return
        if bar is None:
            bar = bool(getattr(self.stream, "isatty", lambda: False)())
        if bar:
            try:
                from tqdm import tqdm
            except ImportError:  # pragma: no cover - tqdm comes with lightning
                bar = False
            else:
                self._bar = tqdm(
                    total=self.total, desc=label, unit=unit, file=self.stream, leave=True
                )
        if self._bar is None:
            self._write(f"{label}: 0/{self.total} {unit}, started")
            if heartbeat and self.every_s > 0 and self.total > 0:
                self._thread = threading.Thread(
                    target=self._beat, name=f"progress:{label}", daemon=True
                )
                self._thread.start()

    @property
    def stream(self) -> IO[str]:
        """The stream written to."""
        return self._stream if self._stream is not None else sys.stderr

    def elapsed(self) -> float:
        """Seconds since the start."""
        return self.clock() - self._start

    def remaining(self) -> float | None:
        """Estimated seconds left (None before the first entry is done)."""
        if self.done <= 0:
            return None
        return self.elapsed() / self.done * max(0, self.total - self.done)

    def line(self) -> str:
        """The current status line."""
        pct = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        head = f"{self.label}: {self.done}/{self.total} {self.unit}{pct}, "
        head += f"{format_seconds(self.elapsed())} elapsed, "
        if self.total and self.done >= self.total:
            return head + "done"
        left = self.remaining()
        return head + ("time left unknown" if left is None else f"~{format_seconds(left)} left")

    def update(self, n: int = 1) -> None:
        """``n`` more entries done; writes a line when one is due."""
        if not self.enabled or n <= 0:
            return
        with self._lock:
            self.done = min(self.total, self.done + n) if self.total else self.done + n
            if self._bar is not None:
                self._bar.update(n)
                return
            step = self._step()
            due = step > self._last_step or self.clock() - self._last_line_at >= self.every_s
            if due and self.done < self.total:
                self._last_step = step
                self._write_locked(self.line())

    def close(self) -> None:
        """Write the final line (plain) or close the bar; stop the heartbeat."""
        if not self.enabled or self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            if self._bar is not None:
                self._bar.close()
            else:
                self._write_locked(self.line())

    # -- internals -------------------------------------------------------------------------
    def _step(self) -> int:
        if not self.total or self.every_fraction <= 0:
            return 0
        return math.floor(self.done / self.total / self.every_fraction + 1e-9)

    def _write(self, text: str) -> None:
        with self._lock:
            self._write_locked(text)

    def _write_locked(self, text: str) -> None:
        self._last_line_at = self.clock()
        try:
            self.stream.write(text + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed stream never ends an evaluation
            pass

    def _beat(self) -> None:
        while not self._stop.wait(min(self.every_s, 1.0)):
            with self._lock:
                if self._closed:
                    return
                if self.clock() - self._last_line_at >= self.every_s:
                    self._write_locked(self.line())
