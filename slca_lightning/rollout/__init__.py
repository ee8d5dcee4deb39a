"""Rollouts: engines (HF, vLLM), the multi-turn agent loop, collation, the data module."""

from slca_lightning.rollout.agent_loop import AgentLoop, RenderMismatchError, middle_cut
from slca_lightning.rollout.collate import collate_episodes
from slca_lightning.rollout.engine import Generation, RolloutEngine, SamplingConfig
from slca_lightning.rollout.hf_engine import HFEngine
from slca_lightning.rollout.record import RolloutRecord

__all__ = [
    "AgentLoop",
    "Generation",
    "HFEngine",
    "RenderMismatchError",
    "RolloutEngine",
    "RolloutRecord",
    "SamplingConfig",
    "collate_episodes",
    "middle_cut",
]
