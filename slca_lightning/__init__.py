"""slca_lightning: SLCA-GRPO (segment-locked credit assignment) for tool-calling LLM agents.

Public names are re-exported here so configs can use either the full class path
(``slca_lightning.advantages.SLCARouter``) or the short one (``slca_lightning.SLCARouter``).

Floors, lowest first: a module imports only from its own floor or below, and never in a
circle (``tests/unit/house/test_import_graph.py`` reads this list and enforces it):

0. foundation: ``types``, ``config``
1. calls, log-probs and chat: ``calls``, ``logprobs``, ``chat_backends``
2. the math: ``segmenters``, ``advantages``, ``rewards``
3. data: ``data``
4. tools: ``tools``
5. models: ``models``
6. rollout: ``rollout``
7. training: ``training``
8. evaluation: ``eval``
9. entry points: ``callbacks``, ``cli``, ``demo``, ``testing``, ``slca_lightning``
   (this file's re-exports)
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
from slca_lightning.calls.parsing import parse_tool_calls
from slca_lightning.logprobs.chunked import token_logprobs
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
from slca_lightning.training.losses import aggregate, clipped_surrogate, k3_kl, policy_loss
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
