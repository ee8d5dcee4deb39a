"""Reward interfaces: a head that scores a rollout batch, and extra per-episode channels.

A :class:`RewardHead` turns the episodes of one rollout batch into a
:class:`~slca_lightning.types.RewardOutput` (channels ``tool``, ``summary``, ``total`` and
any extras, components for logging, boolean flags). A :class:`ChannelReward` computes one
extra channel (ToolPO's ``action``, RLTR's ``rltr``) that a head appends to its output, so
routers that need it find it by name.

A head that knows its channels without running (:attr:`RewardHead.channel_names`) lets
:func:`check_channels` fail at fit start, before any rollout, when the router reads a
channel the head cannot produce.

Rewards must be finite: :func:`check_finite` raises a ``ValueError`` that names the row
(episode index and task id) instead of letting a NaN poison a whole group's advantages.
"""

from __future__ import annotations

import math
import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch

from slca_lightning.types import Episode, RewardOutput, Task

__all__ = [
    "CHANNEL_CLASSES",
    "ChannelReward",
    "RewardHead",
    "check_channels",
    "check_finite",
    "task_question",
    "validate_reward_output",
]


class RewardHead(ABC):
    """Scores every episode of a rollout batch, split into reward channels.

    Implementations return ``RewardOutput.channels`` with at least ``"tool"``,
    ``"summary"`` and ``"total"`` as ``FloatTensor[B]`` (row ``b`` = ``episodes[b]``),
    plus ``components`` (``FloatTensor[B]``, for logging) and ``flags``
    (``BoolTensor[B]``).
    """

    @abstractmethod
    def __call__(self, episodes: list[Episode]) -> RewardOutput:
        """Score ``episodes``; every returned tensor has shape ``[B]``, ``B = len(episodes)``."""

    @property
    def channel_names(self) -> set[str] | None:
        """The channels :meth:`__call__` returns, known without running it (checked against
        the router's needs at fit start); None = unknown, nothing is checked."""
        return None


class ChannelReward(ABC):
    """One extra reward channel computed per episode (e.g. ToolPO ``action``, ``rltr``).

    Attributes:
        name: the channel's key in ``RewardOutput.channels``.
    """

    name: str

    @abstractmethod
    def __call__(self, episodes: list[Episode]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Score ``episodes``.

        Returns:
            ``(values, components)``: the channel's ``FloatTensor[B]`` and named
            ``FloatTensor[B]`` parts kept for logging.
        """


#: The :class:`ChannelReward` that computes each known extra channel (for error hints).
CHANNEL_CLASSES = {
    "action": "slca_lightning.rewards.ActionReward",
    "rltr": "slca_lightning.rewards.RLTRReward",
}


def _class_path(obj: object) -> str:
    """``slca_lightning.rewards.<Name>`` when the package exports the class, else its full path."""
    package = sys.modules.get("slca_lightning.rewards")  # loaded before any of its modules
    cls = type(obj)
    if getattr(package, cls.__name__, None) is cls:
        return f"slca_lightning.rewards.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def check_channels(head: RewardHead, router: object) -> None:
    """Raise ``ValueError`` when ``router`` reads channels ``head`` cannot produce.

    Compares the router's ``channels`` (the channels it reads) with the head's
    :attr:`RewardHead.channel_names`; nothing is checked when either is unknown. The
    message names the router, the missing channels and the config to add.
    """
    needed = set(getattr(router, "channels", None) or ())
    produced = getattr(head, "channel_names", None)
    missing = sorted(needed - set(produced)) if produced is not None else []
    if not missing:
        return
    add = [
        f"        - class_path: {CHANNEL_CLASSES[m]}"
        if m in CHANNEL_CLASSES
        else f"        - class_path: <a ChannelReward>  # with name: {m}"
        for m in missing
    ]
    if hasattr(head, "extra_channels"):
        have = [f"        - class_path: {_class_path(c)}" for c in head.extra_channels]
        hint = (
            f"model:\n  reward_head:\n    class_path: {_class_path(head)}\n"
            "    init_args:\n      extra_channels:\n" + "\n".join(have + add)
        )
    else:
        hint = f"model.reward_head: a reward head that produces {missing}"
    raise ValueError(
        f"model.router {type(router).__name__} reads reward channel(s) {missing}, which "
        f"model.reward_head {type(head).__name__} does not produce (it produces "
        f"{sorted(produced)}); add to the config:\n{hint}"
    )


def check_finite(
    name: str, values: torch.Tensor | Sequence[float], episodes: list[Episode]
) -> None:
    """Raise ``ValueError`` naming the first row whose reward is NaN or infinite.

    Args:
        name: the channel or component being checked (used in the message).
        values: ``FloatTensor[B]`` or a sequence of B floats.
        episodes: the B episodes the values belong to (for the task id).
    """
    flat = (
        values.detach().double().reshape(-1).tolist() if torch.is_tensor(values) else list(values)
    )
    for i, v in enumerate(flat):
        if not math.isfinite(float(v)):
            task_id = episodes[i].task.task_id if i < len(episodes) else "?"
            raise ValueError(
                f"reward {name!r} is {v} at row {i} (task_id={task_id!r}); "
                "rewards must be finite (check the reward function / judge for this episode)"
            )


def validate_reward_output(output: RewardOutput, episodes: list[Episode]) -> None:
    """Check that every tensor of ``output`` has shape ``[B]`` and every float is finite.

    Raises:
        ValueError: on a missing required channel, a wrong shape, or a non-finite value
            (the message names the row and its task id).
    """
    b = len(episodes)
    for required in ("tool", "summary", "total"):
        if required not in output.channels:
            raise ValueError(f"RewardOutput is missing the required channel {required!r}")
    for kind, group in (("channel", output.channels), ("component", output.components)):
        for name, value in group.items():
            if tuple(value.shape) != (b,):
                raise ValueError(f"{kind} {name!r} has shape {tuple(value.shape)}, expected ({b},)")
            check_finite(name, value, episodes)
    for name, value in output.flags.items():
        if tuple(value.shape) != (b,):
            raise ValueError(f"flag {name!r} has shape {tuple(value.shape)}, expected ({b},)")


def task_question(task: Task) -> str:
    """The user question of a task: ``task.question``, else its last user message."""
    if task.question:
        return task.question
    for message in reversed(task.messages):
        if message.get("role") == "user":
            content = message.get("content", "")
            return content if isinstance(content, str) else str(content)
    return ""
