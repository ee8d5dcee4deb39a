"""BFCL (Berkeley Function-Calling Leaderboard): data, the official checker's scoring, multi-turn runs, the evaluator.

The evaluator's names load on first use (``slca_lightning.eval.bfcl.<Name>``, as configs
name them), so importing one part of this package stays light.
"""

from typing import Any

__all__ = ["BFCLEvaluator", "BFCLReport", "main", "resolve_categories"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from slca_lightning.eval.bfcl import evaluator

        return getattr(evaluator, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
