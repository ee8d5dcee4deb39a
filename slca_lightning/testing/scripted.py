"""Moved to :mod:`slca_lightning.rollout.scripted_engine` (kept so old imports keep working)."""

from slca_lightning.rollout.scripted_engine import ScriptedEngine

__all__ = ["ScriptedEngine"]
