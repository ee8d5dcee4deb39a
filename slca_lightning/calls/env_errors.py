"""Environment errors: exceptions from the environment side of an episode, by type.

The environment side is everything that answers the policy: the simulator and its backend,
the rendering and tokenisation of observations, the summary judge. An exception there is
never allowed to end a fit by itself: the place that catches it turns it into an error
observation (or a failed verdict), counts it by exception type, and calls
:func:`report_env_error`, which logs the first traceback of each (place, type) in the
process at ERROR level (later ones are only counted, so a broken environment does not
flood the log). The :class:`~slca_lightning.rollout.datamodule.RolloutDataModule` sums the
step's counts and stops the run when their rate passes ``data.max_env_error_rate``.
"""

from __future__ import annotations

import json
import logging
import threading
import traceback
from collections import Counter

from slca_lightning.calls.sanitize import clean_text, safe_str

__all__ = ["EnvironmentBrokenError", "env_error_json", "report_env_error"]

log = logging.getLogger("slca_lightning.env_errors")

_seen: set[tuple[str, str]] = set()
_lock = threading.Lock()


class EnvironmentBrokenError(RuntimeError):
    """Too many environment errors in one step: training on a broken environment would
    be silent garbage, so the run stops (the message lists the counts by type)."""


def error_type(exc: BaseException) -> str:
    """The name an exception is counted under (its class name)."""
    return type(exc).__name__


def report_env_error(exc: BaseException, where: str, counts: Counter | None = None) -> str:
    """Count ``exc`` under its type in ``counts`` (when given) and log its traceback if it
    is the first of its type at ``where`` in this process; returns the type name."""
    name = error_type(exc)
    if counts is not None:
        counts[name] += 1
    with _lock:
        first = (where, name) not in _seen
        _seen.add((where, name))
    if first:
        try:
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        except Exception:  # formatting can fail (an unprintable argument): keep the type
            tb = f"{name}: {safe_str(exc)}"
        log.error(
            "environment error in %s: %s (the first of its type there; later ones are only "
            "counted, as env/errors/%s)\n%s",
            where,
            name,
            name,
            clean_text(tb, 20_000),
        )
    return name


def env_error_json(exc: BaseException, where: str) -> str:
    """The observation text of an environment error: ``{"error": "environment error in
    <where>: <Type>: <message>"}`` (clean, short JSON)."""
    message = f"environment error in {where}: {error_type(exc)}: {safe_str(exc, 300)}"
    return json.dumps({"error": message}, ensure_ascii=False)
