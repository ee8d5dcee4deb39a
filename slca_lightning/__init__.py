"""slca_lightning: SLCA-GRPO (segment-locked credit assignment) for tool-calling LLM agents.

Public names are re-exported here so configs can use either the full class path
(``slca_lightning.advantages.SLCARouter``) or the short one (``slca_lightning.SLCARouter``).

Floors, lowest first: a module imports only from its own floor or below, and never in a
circle (``tests/unit/house/test_import_graph.py`` reads this list and enforces it):

0. foundation: ``types``, ``logprobs``, ``moved``, ``errors``, ``cache``, ``threads``,
   ``range_rule``, ``range_table``,
   ``checkpoints``, ``reference_weights``, ``config_checks``, ``console``
1. calls and chat: ``calls``, ``model_logprobs``, ``backends``
2. the math: ``segmenters``, ``advantages``, ``loss_terms``, ``losses``, ``rewards``
3. data: ``data``
4. tools: ``tools``
5. models: ``models``, ``policy``, ``export``
6. rollout: ``rollout``
7. the LightningModule: ``module``, ``policy_update``
8. evaluation: ``eval``
9. entry points: ``callbacks``, ``cli``, ``cli_app``, ``cli_export``, ``demo``,
   ``provenance``, ``testing``, ``slca_lightning`` (this file's re-exports)
"""

__version__ = "0.1.0"

from slca_lightning.advantages import (
    AdvantageRouter,
    ChannelRouter,
    GRPORouter,
    MTGRPORouter,
    RLTRRouter,
    SLCARouter,
    Term,
    ToolPORouter,
    advantage_contamination,
    group_normalize,
)
from slca_lightning.losses import aggregate, clipped_surrogate, k3_kl, policy_loss, token_logprobs
from slca_lightning.moved import alias
from slca_lightning.rewards import (
    ActionReward,
    HierarchicalReward,
    LLMJudge,
    RewardHead,
    RLTRReward,
    RuleJudge,
    SummaryJudge,
    process_reward,
)
from slca_lightning.segmenters import (
    MaskRunSegmenter,
    Segmenter,
    TagSegmenter,
    WholeSegmenter,
    mask_run_segments,
)
from slca_lightning.tools import parse_tool_calls
from slca_lightning.types import (
    Episode,
    RewardOutput,
    RolloutBatch,
    Segments,
    Task,
    ToolCall,
    ToolResult,
)

__all__ = [
    "ActionReward",
    "AdvantageRouter",
    "ChannelRouter",
    "Episode",
    "GRPORouter",
    "HierarchicalReward",
    "LLMJudge",
    "MTGRPORouter",
    "MaskRunSegmenter",
    "RLTRReward",
    "RLTRRouter",
    "RewardHead",
    "RewardOutput",
    "RolloutBatch",
    "RuleJudge",
    "SLCARouter",
    "Segmenter",
    "Segments",
    "SummaryJudge",
    "TagSegmenter",
    "Task",
    "Term",
    "ToolCall",
    "ToolPORouter",
    "ToolResult",
    "WholeSegmenter",
    "__version__",
    "advantage_contamination",
    "aggregate",
    "clipped_surrogate",
    "group_normalize",
    "k3_kl",
    "mask_run_segments",
    "parse_tool_calls",
    "policy_loss",
    "process_reward",
    "token_logprobs",
]

# modules that moved keep importing under their old names (configs, checkpoints, scripts)
alias({"slca_lightning.sft": "slca_lightning.models.sft"})
