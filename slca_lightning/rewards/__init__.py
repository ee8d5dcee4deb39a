"""Rewards: HierR (process + judged summary + omission guard), judges, ToolPO and RLTR channels.

``class_path: slca_lightning.rewards.HierarchicalReward`` and the short names both work.
"""

from slca_lightning.calls.gold import normalize_gold_calls
from slca_lightning.rewards.base import (
    CHANNEL_CLASSES,
    ChannelReward,
    RewardHead,
    check_channels,
    check_finite,
    task_question,
    validate_reward_output,
)
from slca_lightning.rewards.hierarchical import PROCESS_COMPONENTS, HierarchicalReward
from slca_lightning.rewards.judges import (
    DEFAULT_JUDGE_PROMPT,
    JudgeRequest,
    JudgeVerdict,
    LLMJudge,
    SummaryJudge,
    parse_rating,
)
from slca_lightning.rewards.noisy_judge import NoisyJudge, request_noise
from slca_lightning.rewards.process import (
    DEFAULT_PROCESS_WEIGHTS,
    action_score,
    loose_match,
    process_reward,
)
from slca_lightning.rewards.reference_judge import ReferenceJudge, token_f1
from slca_lightning.rewards.rltr import (
    DEFAULT_COMPLETENESS_PROMPT,
    CompletenessVerifier,
    GoldCoverageVerifier,
    LLMCompletenessVerifier,
    RLTRReward,
    canonical_call,
    count_consecutive_repeats,
)
from slca_lightning.rewards.rule_judge import RuleJudge, extract_facts
from slca_lightning.rewards.toolpo import ActionReward

__all__ = [
    "CHANNEL_CLASSES",
    "DEFAULT_COMPLETENESS_PROMPT",
    "DEFAULT_JUDGE_PROMPT",
    "DEFAULT_PROCESS_WEIGHTS",
    "PROCESS_COMPONENTS",
    "ActionReward",
    "ChannelReward",
    "CompletenessVerifier",
    "GoldCoverageVerifier",
    "HierarchicalReward",
    "JudgeRequest",
    "JudgeVerdict",
    "LLMCompletenessVerifier",
    "LLMJudge",
    "NoisyJudge",
    "RLTRReward",
    "ReferenceJudge",
    "RewardHead",
    "RuleJudge",
    "SummaryJudge",
    "action_score",
    "canonical_call",
    "check_channels",
    "check_finite",
    "count_consecutive_repeats",
    "extract_facts",
    "loose_match",
    "normalize_gold_calls",
    "parse_rating",
    "process_reward",
    "request_noise",
    "task_question",
    "token_f1",
    "validate_reward_output",
]
