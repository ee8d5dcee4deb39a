"""RewardModelJudge: a Hugging Face sequence-classification model rates the final reply.

The model reads one text per episode: ``"[User question]\\n…\\n\\n[Tool results]\\n(1) …\\n\\n
[Final reply]\\n…"`` (tool results middle-cut like :class:`~slca_lightning.rewards.judges.
LLMJudge`'s), truncated to ``max_length`` tokens from the left so the reply is always seen.
The score in [0, 1] is ``sigmoid(logit)`` for a one-label head, else the softmax probability
of ``positive_label``. Failures (a forward pass that raises, a non-finite score) give
``score = 0, failed = True`` and are counted (``judge_failed`` in ``stats``); never raises.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from slca_lightning.rewards.judges import JudgeRequest, JudgeVerdict, SummaryJudge, middle_cut

__all__ = ["RewardModelJudge", "render_judge_text"]


def render_judge_text(request: JudgeRequest, max_result_chars: int | None = 4000) -> str:
    """The text the reward model reads for one request."""
    results = "\n\n".join(
        f"({i}) {middle_cut(r, max_result_chars)}" for i, r in enumerate(request.tool_results, 1)
    )
    return (
        f"[User question]\n{request.question}\n\n[Tool results]\n{results or '(no tool results)'}"
        f"\n\n[Final reply]\n{request.reply}"
    )


class RewardModelJudge(SummaryJudge):
    """Scores replies with a sequence-classification model (see the module docstring).

    Args:
        model: a local HF folder (``AutoModelForSequenceClassification`` + tokenizer), or a
            loaded model object (then pass ``tokenizer``).
        tokenizer: the tokenizer when ``model`` is an object.
        positive_label: the class whose probability is the score (multi-label heads).
        max_length: token cap per text (left-truncated).
        batch_size: texts per forward pass.
        max_result_chars: middle-cut of each tool result.
        device: torch device for the model.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        positive_label: int = 1,
        max_length: int = 1024,
        batch_size: int = 8,
        max_result_chars: int | None = 4000,
        device: str = "cpu",
    ) -> None:
        if isinstance(model, str):
            from transformers import AutoModelForSequenceClassification, AutoTokenizer

            tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
            model = AutoModelForSequenceClassification.from_pretrained(model)
        if tokenizer is None:
            raise ValueError("RewardModelJudge needs a tokenizer when model is an object")
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.tokenizer.truncation_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if getattr(self.model.config, "pad_token_id", None) is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.positive_label = positive_label
        self.max_length, self.batch_size = max_length, max(1, int(batch_size))
        self.max_result_chars = max_result_chars
        self.device = device
        self.num_calls = 0
        self.num_failures = 0
        self.num_cache_hits = 0

    @torch.no_grad()
    def _scores(self, texts: list[str]) -> list[float]:
        enc = self.tokenizer(
            texts, return_tensors="pt", padding=True, truncation=True, max_length=self.max_length
        ).to(self.device)
        logits = self.model(**enc).logits.float()
        if logits.shape[-1] == 1:
            probs = torch.sigmoid(logits[:, 0])
        else:
            probs = torch.softmax(logits, dim=-1)[:, self.positive_label]
        return [float(p) for p in probs]

    def score(self, requests: list[JudgeRequest]) -> list[JudgeVerdict]:
        """One verdict per request, in order; never raises."""
        verdicts: list[JudgeVerdict] = []
        for start in range(0, len(requests), self.batch_size):
            chunk = requests[start : start + self.batch_size]
            texts = [render_judge_text(r, self.max_result_chars) for r in chunk]
            try:
                scores = self._scores(texts)
            except Exception as exc:  # a broken model must not kill the run
                verdicts += [JudgeVerdict(0.0, True, f"{type(exc).__name__}: {exc}") for _ in chunk]
                continue
            for value in scores:
                ok = math.isfinite(value)
                verdicts.append(JudgeVerdict(value if ok else 0.0, not ok, f"{value:.6f}"))
        self.num_calls += len(verdicts)
        self.num_failures += sum(v.failed for v in verdicts)
        return verdicts
