"""Advantage estimators ("routers"): channel rewards → per-token advantages."""

from slca_lightning.advantages.base import AdvantageRouter, RoutedAdvantages
from slca_lightning.advantages.diagnostics import (
    advantage_contamination,
    constant_channels,
    no_signal_message,
    routing_diagnostics,
    signal_rows,
    summary_leakage,
)
from slca_lightning.advantages.group_norm import check_scores, group_normalize, weight_negatives
from slca_lightning.advantages.presets import (
    GRPORouter,
    MTGRPORouter,
    RLTRRouter,
    SLCARouter,
    ToolPORouter,
)
from slca_lightning.advantages.routing import ChannelRouter, Term

__all__ = [
    "AdvantageRouter",
    "ChannelRouter",
    "GRPORouter",
    "MTGRPORouter",
    "RLTRRouter",
    "RoutedAdvantages",
    "SLCARouter",
    "Term",
    "ToolPORouter",
    "advantage_contamination",
    "check_scores",
    "constant_channels",
    "group_normalize",
    "no_signal_message",
    "routing_diagnostics",
    "signal_rows",
    "summary_leakage",
    "weight_negatives",
]
