"""Rule-based process (tool) reward against gold calls (METHOD §4.1), and ToolPO's action score.

    process = 0.10·fmt + 0.25·name + 0.15·key + 0.20·value + 0.30·parallel

computed on the text with ``<think>``/``<thinking>`` blocks stripped:

- fmt: valid ``<tool_call>`` blocks / max(opens, closes); 0 when there is no tag.
- name: multiset F1 of predicted names (calls of valid blocks) vs all gold names;
  1 when both are empty, 0 when exactly one is.
- key, value: over gold calls with non-empty arguments, walked in order. Each is matched to
  the unused predicted call of the same name with the largest ``key + value`` (first on a
  tie), where key = Jaccard of the key sets and value = shared keys whose values loosely
  match / gold keys. No candidate with ``key + value > 0`` → that gold call scores 0, 0.
  No such gold calls → 1, 1 (checked first); no valid predicted call → 0, 0.
- parallel: 1 when #calls in the first valid predicted step (0 if none) equals #calls in
  the first gold step (0 if none). A predicted step is, on a plain text, its first valid
  block (the paper); on an episode, the valid blocks of its first assistant turn that has
  one (:func:`first_step_calls`). The two agree whenever a turn holds at most one block,
  as under the paper's ``turn_end="tool_call"`` (a turn stops at its first
  ``</tool_call>``); with ``turn_end="eos"`` a turn may hold one block per call (as
  Qwen2.5 writes parallel calls) and all of them count.

So a correct abstention (no tag, gold ``[]``) scores 0, 1, 1, 1, 1 → 0.9.

Loose match (:func:`loose_match`), decided in this order:

1. either side a bool → both read as booleans (bool; 1/0; "true"/"false"/"1"/"0" after
   trim + lower-case), equal; anything else is no match;
2. either side a list/dict → equal as ``json.dumps(sort_keys=True)`` (exact inside);
3. either side a number → both read as numbers, ``|a − b| ≤ 1e-9`` (int vs float fine).
   A *numeric string* (``" 5 "``, ``"2.50"``, ``"1e3"``; plain decimal/exponent notation,
   no ``nan``/``inf``/underscores) matches a number: models and datasets both write
   numbers as strings often enough, and METHOD's match is meant to be loose. Two strings
   are compared as strings, never as numbers. NaN matches nothing;
4. two strings → equal after trim + lower-case;
5. otherwise ``==`` (so ``None`` matches ``None``).

ToolPO (METHOD §5, :func:`action_score`): strictly correct calls / |gold calls|, where a
predicted call is correct for a gold call when the names are equal and every gold key is
present with a loosely matching value (extra predicted keys are allowed). Greedy
one-to-one: gold calls in order, each takes the first unused correct predicted call.
Extra predicted calls are not penalised (it is a recall). With no gold calls the score is
1.0 when nothing was called and 0.0 otherwise, so abstention is rewarded exactly when it
is right and the score stays in [0, 1].
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from slca_lightning.calls.gold import normalize_gold_calls
from slca_lightning.calls.parsing import ParseResult, parse_tool_calls
from slca_lightning.types import ToolCall

__all__ = [
    "DEFAULT_PROCESS_WEIGHTS",
    "PROCESS_KEYS",
    "action_score",
    "check_process_weights",
    "first_step_calls",
    "key_value_scores",
    "loose_match",
    "name_f1",
    "process_reward",
    "process_reward_from_parse",
]

DEFAULT_PROCESS_WEIGHTS: dict[str, float] = {
    "fmt": 0.10,
    "name": 0.25,
    "key": 0.15,
    "value": 0.20,
    "parallel": 0.30,
}
PROCESS_KEYS = tuple(DEFAULT_PROCESS_WEIGHTS)

_NUM_TOL = 1e-9
_INT_RE = re.compile(r"[+-]?\d+")
_FLOAT_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_TRUE_STR = frozenset({"true", "1"})
_FALSE_STR = frozenset({"false", "0"})


# --------------------------------------------------------------------------- loose match


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _as_bool(x: Any) -> bool | None:
    if isinstance(x, bool):
        return x
    if _is_number(x):
        if x == 1:
            return True
        if x == 0:
            return False
        return None
    if isinstance(x, str):
        s = x.strip().lower()
        if s in _TRUE_STR:
            return True
        if s in _FALSE_STR:
            return False
    return None


def _as_number(x: Any) -> int | float | None:
    if _is_number(x):
        return x
    if isinstance(x, str):
        s = x.strip()
        if len(s) > 400:  # no real argument is that long; keeps int() cheap
            return None
        if _INT_RE.fullmatch(s):
            return int(s)
        if _FLOAT_RE.fullmatch(s):
            return float(s)
    return None


def _numbers_close(a: int | float, b: int | float) -> bool:
    if a == b:  # exact ints of any size, and inf == inf
        return True
    try:
        diff = abs(float(a) - float(b))
    except OverflowError:
        return False
    return diff <= _NUM_TOL  # NaN compares False


def _json_equal(a: Any, b: Any) -> bool:
    try:
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        return False


def loose_match(pred: Any, gold: Any) -> bool:
    """METHOD §4.1 loose equality of one argument value (rules in the module docstring)."""
    if isinstance(pred, bool) or isinstance(gold, bool):
        a, b = _as_bool(pred), _as_bool(gold)
        return a is not None and a == b
    if isinstance(pred, (list, tuple, dict)) or isinstance(gold, (list, tuple, dict)):
        return _json_equal(pred, gold)
    if _is_number(pred) or _is_number(gold):
        a, b = _as_number(pred), _as_number(gold)
        return a is not None and b is not None and _numbers_close(a, b)
    if isinstance(pred, str) and isinstance(gold, str):
        return pred.strip().lower() == gold.strip().lower()
    try:
        return bool(pred == gold)
    except Exception:  # exotic objects with a raising __eq__: no match
        return False


# --------------------------------------------------------------------------- components


def _as_steps(gold: Any) -> list[list[ToolCall]]:
    """Already-normalised steps pass through; any other shape goes through the normaliser."""
    if isinstance(gold, list) and all(
        isinstance(step, list) and all(isinstance(c, ToolCall) for c in step) for step in gold
    ):
        return gold
    return normalize_gold_calls(gold)[0]


def name_f1(pred_names: list[str], gold_names: list[str]) -> float:
    """Multiset F1: ``2·|P ∩ G| / (|P| + |G|)``; 1 if both empty, 0 if exactly one is."""
    if not pred_names and not gold_names:
        return 1.0
    if not pred_names or not gold_names:
        return 0.0
    common = sum((Counter(pred_names) & Counter(gold_names)).values())
    return 2.0 * common / (len(pred_names) + len(gold_names))


def key_value_scores(
    pred_calls: list[ToolCall], gold_steps: list[list[ToolCall]]
) -> tuple[float, float]:
    """METHOD §4.1 key and value scores (greedy matching by ``key + value``).

    Args:
        pred_calls: predicted calls (of valid blocks), in order.
        gold_steps: gold steps (any shape :func:`normalize_gold_calls` accepts).

    Returns:
        ``(key, value)``, each a mean over the gold calls with non-empty arguments.
    """
    gold = [c for step in _as_steps(gold_steps) for c in step if c.arguments]
    if not gold:
        return 1.0, 1.0
    if not pred_calls:
        return 0.0, 0.0
    used = [False] * len(pred_calls)
    key_sum = value_sum = 0.0
    for g in gold:
        gold_keys = set(g.arguments)
        best: tuple[int, float, float] | None = None
        best_total = 0.0
        for i, p in enumerate(pred_calls):
            if used[i] or p.name != g.name:
                continue
            pred_args = p.arguments if isinstance(p.arguments, dict) else {}
            shared = gold_keys.intersection(pred_args)
            key = len(shared) / len(gold_keys.union(pred_args))
            value = sum(1 for k in shared if loose_match(pred_args[k], g.arguments[k]))
            value /= len(gold_keys)
            if key + value > best_total:  # strict: the first candidate wins a tie
                best, best_total = (i, key, value), key + value
        if best is not None:
            used[best[0]] = True
            key_sum += best[1]
            value_sum += best[2]
    return key_sum / len(gold), value_sum / len(gold)


def check_process_weights(weights: Mapping[str, float] | None) -> dict[str, float]:
    """Validate process weights: exactly the five keys, finite, ≥ 0, summing to 1 (±1e-6).

    Returns:
        A plain dict copy (the defaults when ``weights`` is None).

    Raises:
        ValueError: naming what is wrong.
    """
    if weights is None:
        return dict(DEFAULT_PROCESS_WEIGHTS)
    if not isinstance(weights, Mapping):
        raise ValueError(f"process weights must be a mapping, got {type(weights).__name__}")
    keys = set(weights)
    if keys != set(PROCESS_KEYS):
        missing = sorted(set(PROCESS_KEYS) - keys)
        extra = sorted(map(str, keys - set(PROCESS_KEYS)))
        raise ValueError(
            f"process weights need exactly the keys {list(PROCESS_KEYS)}; "
            f"missing {missing}, unexpected {extra}"
        )
    out: dict[str, float] = {}
    for k in PROCESS_KEYS:
        w = weights[k]
        if not _is_number(w) or not math.isfinite(w) or w < 0:
            raise ValueError(f"process weight {k!r} must be a finite number >= 0, got {w!r}")
        out[k] = float(w)
    total = sum(out.values())
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f"process weights must sum to 1 (±1e-6), got {total!r}: {out}")
    return out


def first_step_calls(turn_texts: Iterable[str], allowed_tools: Iterable[str] | None) -> int:
    """Calls in the valid blocks of the first assistant turn that has a valid block (0: none).

    The predicted "first step" of an episode for the ``parallel`` component: with one block
    per turn it is the paper's first valid block; a turn that writes one block per parallel
    call counts all of them.
    """
    allowed = list(allowed_tools) if allowed_tools is not None else None
    for text in turn_texts:
        parsed = parse_tool_calls(text, allowed, strip_thinking=True)
        valid = [b for b in parsed.blocks if b.valid]
        if valid:
            return sum(len(b.calls) for b in valid)
    return 0


def process_reward_from_parse(
    parsed: ParseResult,
    gold_steps: Any,
    weights: Mapping[str, float] | None = None,
    first_step: int | None = None,
) -> dict[str, float]:
    """:func:`process_reward` on an existing parse (saves a second parse in reward heads).

    ``parsed`` must come from :func:`parse_tool_calls` with think-stripping on and the
    task's allowed tools. ``first_step``: the number of calls of the predicted first step
    when the caller knows the turns (:func:`first_step_calls`); None: the calls of the
    first valid block of ``parsed``.
    """
    w = check_process_weights(weights)
    steps = _as_steps(gold_steps)
    pred_calls = parsed.calls
    gold_names = [c.name for step in steps for c in step]
    key, value = key_value_scores(pred_calls, steps)
    if first_step is None:
        first = parsed.first_valid_block
        n_pred_first = len(first.calls) if first is not None else 0
    else:
        n_pred_first = first_step
    n_gold_first = len(steps[0]) if steps else 0
    comps = {
        "fmt": parsed.fmt,
        "name": name_f1([c.name for c in pred_calls], gold_names),
        "key": key,
        "value": value,
        "parallel": 1.0 if n_pred_first == n_gold_first else 0.0,
    }
    comps["process"] = sum(w[k] * comps[k] for k in PROCESS_KEYS)
    return comps


def process_reward(
    text: str,
    gold_calls: Any,
    allowed_tools: Iterable[str] | None,
    weights: dict[str, float] | None = None,
) -> dict[str, float]:
    """METHOD §4.1 process reward of one rollout's text.

    Args:
        text: the assistant text (all turns joined); think blocks are stripped here.
        gold_calls: gold in any shape :func:`normalize_gold_calls` accepts, or already
            ``list[list[ToolCall]]``.
        allowed_tools: names a call may use (None: any name).
        weights: the five component weights (default :data:`DEFAULT_PROCESS_WEIGHTS`).

    Returns:
        ``{"fmt", "name", "key", "value", "parallel", "process"}``, all in [0, 1].

    Raises:
        ValueError: bad weights or a gold value of no accepted shape (never model output).
    """
    check_process_weights(weights)  # fail on bad config before touching the text
    parsed = parse_tool_calls(text, allowed_tools, strip_thinking=True)
    return process_reward_from_parse(parsed, gold_calls, weights)


def action_score(pred_calls: list[ToolCall], gold_steps: list[list[ToolCall]]) -> float:
    """ToolPO action reward: strictly correct calls / |gold calls| (module docstring).

    Args:
        pred_calls: predicted calls (of valid blocks), in order.
        gold_steps: gold steps (any shape :func:`normalize_gold_calls` accepts).

    Returns:
        A score in [0, 1]; with no gold calls, 1.0 if ``pred_calls`` is empty else 0.0.
    """
    gold = [c for step in _as_steps(gold_steps) for c in step]
    if not gold:
        return 0.0 if pred_calls else 1.0
    used = [False] * len(pred_calls)
    correct = 0
    for g in gold:
        for i, p in enumerate(pred_calls):
            if used[i] or p.name != g.name:
                continue
            args = p.arguments if isinstance(p.arguments, dict) else {}
            if all(k in args and loose_match(args[k], v) for k, v in g.arguments.items()):
                used[i] = True
                correct += 1
                break
    return correct / len(gold)
