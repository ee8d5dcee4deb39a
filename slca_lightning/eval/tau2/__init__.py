"""τ²-bench: environment, simulated users, the agent loop, scoring, the evaluator.

The evaluator's names load on first use (``slca_lightning.eval.tau2.<Name>``, as configs
name them), so importing one part of this package stays light.
"""

from typing import Any

__all__ = ["Tau2Evaluator", "Tau2Report", "main"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from slca_lightning.eval.tau2 import evaluator

        return getattr(evaluator, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
