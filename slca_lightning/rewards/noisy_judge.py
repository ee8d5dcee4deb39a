"""NoisyJudge: another judge's score plus seeded noise, for controlled credit-assignment studies.

SLCA's claim is about the *noise* of the summary reward: under GRPO it reaches the tool
tokens, under SLCA it cannot. To vary that noise on purpose, :class:`NoisyJudge` wraps any
:class:`~slca_lightning.rewards.judges.SummaryJudge` and adds Gaussian noise to each score:

    score = clip(base + noise_std · z, 0, 1),   z ~ N(0, 1)

``z`` is drawn from a hash of ``(seed, question, tool results, reply)``: equal requests get
equal noise (a frozen judge's idiosyncratic error, as a temperature-0 LLM judge has), different
requests independent noise, and a run is reproducible and resume-safe without any RNG state.
A failed base verdict stays failed (score 0), un-noised. ``noise_std = 0`` returns the base
scores unchanged.
"""

from __future__ import annotations

import hashlib
import math
import random

from slca_lightning.rewards.judges import JudgeRequest, JudgeVerdict, SummaryJudge
from slca_lightning.rewards.rule_judge import RuleJudge

__all__ = ["NoisyJudge", "request_noise"]


def request_noise(request: JudgeRequest, seed: int) -> float:
    """The standard-normal draw for ``request`` under ``seed`` (a pure function of both)."""
    h = hashlib.blake2b(digest_size=8)
    for part in (str(seed), request.question, *request.tool_results, "\x00", request.reply):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x1f")
    return random.Random(int.from_bytes(h.digest(), "little")).gauss(0.0, 1.0)


class NoisyJudge(SummaryJudge):
    """Scores of ``judge`` plus ``noise_std`` Gaussian noise keyed by the request, clipped to [0, 1].

    Args:
        judge: the base judge (default: a :class:`RuleJudge` that reads only the reply and
            the question, ``grounding_weight=0``, so its score is independent of which
            tools were called).
        noise_std: standard deviation of the added noise, ≥ 0.
        seed: noise seed; the same seed and request always give the same noise.
    """

    def __init__(
        self, judge: SummaryJudge | None = None, noise_std: float = 0.0, seed: int = 0
    ) -> None:
        if not (math.isfinite(noise_std) and noise_std >= 0):
            raise ValueError(f"NoisyJudge.noise_std must be finite and ≥ 0, got {noise_std}")
        self.judge = judge if judge is not None else RuleJudge(grounding_weight=0.0)
        self.noise_std = float(noise_std)
        self.seed = int(seed)
        self.num_calls = 0
        self.num_failures = 0

    def score(self, requests: list[JudgeRequest]) -> list[JudgeVerdict]:
        """The base verdicts with noise added to every successful score."""
        base = self.judge.score(requests)
        if len(base) != len(requests):
            raise ValueError(
                f"{type(self.judge).__name__}.score returned {len(base)} verdicts "
                f"for {len(requests)} requests"
            )
        out = []
        for request, verdict in zip(requests, base, strict=True):
            if verdict.failed or self.noise_std == 0.0:
                out.append(verdict)
                continue
            z = request_noise(request, self.seed)
            noisy = min(1.0, max(0.0, float(verdict.score) + self.noise_std * z))
            out.append(
                JudgeVerdict(noisy, False, f"{verdict.raw};base={verdict.score:.4f};z={z:.4f}")
            )
        self.num_calls += len(requests)
        self.num_failures += sum(v.failed for v in out)
        self.num_cache_hits = getattr(self.judge, "num_cache_hits", 0)
        return out
