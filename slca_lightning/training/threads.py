"""How many torch threads a run uses: the ``threads`` setting, ``OMP_NUM_THREADS``, or a
load-aware default.

On a machine shared with other jobs, torch's default of one thread per core is a trap: a
matmul split over two cores waits for the slower one, and when another process holds a
core that is several times slower than one thread (8 × 32 tokens of generation on
SmolLM2-135M: 82.8 s with 2 threads vs 14.1 s with 1 while the other core was busy; see
``benchmarks/threads.py`` for the measurement on your machine). The default therefore gives
the run the cores nobody else is using: ``max(1, cores - round(load))``, ``cores`` the
CPUs this process may run on and ``load`` the one-minute load average before the run
starts (what other processes keep busy). :func:`apply_threads` sets it and logs the
choice and its reason; ``provenance.json`` records the threads every fit ran with.
"""

from __future__ import annotations

import logging
import os

__all__ = [
    "apply_threads",
    "choose_threads",
    "ensure_threads",
    "threads_for_load",
]

log = logging.getLogger(__name__)


def threads_for_load(cores: int, load: float) -> int:
    """The default thread count: the cores left after ``load`` busy ones, at least 1."""
    return max(1, int(cores) - round(max(0.0, float(load))))


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def choose_threads(setting: int | None = None) -> tuple[int, str]:
    """``(threads, reason)``: ``setting`` when given, else ``$OMP_NUM_THREADS`` when set,
    else :func:`threads_for_load` of this machine now.

    Raises:
        ValueError: ``setting`` < 1, or ``OMP_NUM_THREADS`` is not a positive integer.
    """
    if setting is not None:
        if int(setting) < 1:
            raise ValueError(
                f"threads must be an integer >= 1 (or null for the default), got {setting}"
            )
        return int(setting), "the threads setting"
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"OMP_NUM_THREADS must be a positive integer, got {env!r}")
        return int(env), "OMP_NUM_THREADS"
    cores = _cores()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average here: assume an idle machine
        load = 0.0
    n = threads_for_load(cores, load)
    return n, f"default: {cores} cores - load {load:.2f} (threads=N or OMP_NUM_THREADS to override)"


_APPLIED: list[int] = []  # the count the last apply_threads set in this process


def apply_threads(setting: int | None = None, where: str = "slca") -> int:
    """Set torch's intra-op threads by :func:`choose_threads`, log it, return the count."""
    import torch

    n, why = choose_threads(setting)
    torch.set_num_threads(n)
    _APPLIED[:] = [n]
    log.info("%s: %d torch thread%s (%s)", where, n, "" if n == 1 else "s", why)
    return n


def ensure_threads(where: str) -> int:
    """The thread choice of :func:`apply_threads` when nothing in this process made one yet
    (a fit from Python gets what ``slca fit`` gets); else the count already chosen."""
    return _APPLIED[0] if _APPLIED else apply_threads(None, where)
