"""Alternated timing and paired ratios for benchmarks on a shared, noisy machine.

Other jobs share the CPU, so absolute seconds drift by 2× within minutes. Two systems are
therefore run in one process, alternated (order swapped every round, A B, B A, A B, ...,
so neither always runs right after the other), and compared by the median over rounds of
the paired ratio (round ``i`` of B over round ``i`` of A): drift that is slow compared
with one round cancels in each pair.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable


def alternate(
    systems: dict[str, Callable[[], float | None]], rounds: int, warmup: int = 1
) -> dict[str, list[float]]:
    """Run every system once per round, alternating their order; return seconds per call.

    Each callable runs one measured unit of work. It may return its own measured seconds
    (to leave set-up out of the timing); when it returns None, its wall time is used.
    ``warmup`` rounds run first and are not recorded (allocator, kernel and cache set-up).
    """
    if rounds < 1:
        raise ValueError(f"rounds must be ≥ 1, got {rounds}")
    names = list(systems)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(warmup + rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            t0 = time.perf_counter()
            got = systems[name]()
            seconds = time.perf_counter() - t0 if got is None else float(got)
            if r >= warmup:
                out[name].append(seconds)
    return out


def paired_ratio(numerator: list[float], denominator: list[float]) -> float:
    """Median over rounds of ``numerator[i] / denominator[i]`` (same-round pairs)."""
    if len(numerator) != len(denominator) or not numerator:
        raise ValueError(
            f"need equal, non-empty lists of rounds, got {len(numerator)} and {len(denominator)}"
        )
    return statistics.median(n / d for n, d in zip(numerator, denominator))


def spread(values: list[float]) -> tuple[float, float]:
    """``(min, max)`` of ``values``: shown next to a median so its noise is visible."""
    return min(values), max(values)


def machine() -> dict:
    """The CPU model, core count and Python version written beside a table."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(x.split(":", 1)[1].strip() for x in fh if x.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpus": os.cpu_count(), "cpu": cpu, "python": platform.python_version()}


def child_json(cmd: list[str], env: dict, cwd, what: str) -> tuple[dict, float]:
    """Run ``cmd`` to its end; the JSON of its last ``RESULT <json>`` line and its own peak
    RSS in MB (``os.wait4``: this child's rusage alone). A failure raises with its output."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd
    )
    output = proc.stdout.read()  # to EOF, then reap with wait4 for this child's own rusage
    proc.stdout.close()
    _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    line = next((x for x in reversed(output.splitlines()) if x.startswith("RESULT ")), None)
    if code != 0 or line is None:
        raise RuntimeError(f"{what} failed (exit {code}):\n{output[-4000:]}")
    return json.loads(line[len("RESULT ") :]), usage.ru_maxrss / 1024.0


def run_record(shape: dict, got: dict, t0: float, load_before, **extra) -> dict:
    """The record every alternated benchmark writes: its shape, the machine, the load before
    and after, the date, the wall time and the rounds (``extra`` keys first)."""
    return {
        "shape": shape,
        **extra,
        "machine": machine(),
        "load_before": list(load_before),
        "load_after": list(os.getloadavg()),
        "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        "wall_s": time.perf_counter() - t0,
        "rounds": got,
    }
