"""Rollout throughput: ``HFEngine.generate`` vs a bare ``model.generate`` loop.

Both decode the same prompts with the same ``"tiny"`` model (random weights; float32,
eval mode, ``no_grad``), greedily, ``max_new_tokens`` per row, all rows in one
``generate`` call (HFEngine's ``max_batch_size`` ≥ rows), no stop strings. Greedy so that
both return the same tokens (the random model rarely picks EOS greedily, so rows run to
``max_new_tokens``): with sampling, tokens/s would also vary with where EOS was drawn.

- **HFEngine**: ``HFEngine(model, tokenizer).generate(prompts, SamplingConfig(...))``:
  prefix clustering (prompts sharing a long prefix are prefilled once), left padding, the
  call with ``output_logits=True``, per-token log-probs of the sampled tokens, cutting at EOS.
- **bare**: what a user would write without it: left-pad the prompts, one
  ``model.generate(input_ids, attention_mask, do_sample=False, ...)`` returning
  only the sequences (no log-probs), count tokens up to the first EOS/pad.

Tokens/s = sampled tokens returned (up to and including EOS) ÷ seconds of the call.
The ratio is of tokens/s, paired per round. Two prompt sets: **distinct** (``rows`` different
prompts of 50–100 % of ``prompt_len`` tokens) and **G=4 shared** (``rows / 4`` prompts,
each repeated 4 times, as the G rollouts of a task are).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
from _timing import alternate, paired_ratio, spread


@dataclass
class GenerationShape:
    """Prompt set and lengths of the generation benchmark."""

    rows: int = 16
    prompt_len: int = 1000
    max_new_tokens: int = 64
    rounds: int = 5
    warmup: int = 1


def make_prompts(shape: GenerationShape, vocab: int, shared: bool, seed: int = 0) -> list:
    """``rows`` token-id prompts: distinct, or ``rows / 4`` prompts each repeated 4 times."""
    g = torch.Generator().manual_seed(seed)
    n = shape.rows // 4 if shared else shape.rows
    lo = max(2, shape.prompt_len // 2)
    out = []
    for _ in range(max(n, 1)):
        length = int(torch.randint(lo, shape.prompt_len + 1, (1,), generator=g))
        out.append(torch.randint(3, vocab, (length,), generator=g).tolist())
    return [p for p in out for _ in range(4)] if shared else out


class EngineRollout:
    """One ``HFEngine.generate`` call per ``__call__``; tokens returned are recorded."""

    def __init__(self, model, tokenizer, prompts: list, max_new_tokens: int):
        from slca_lightning.rollout.engine import SamplingConfig
        from slca_lightning.rollout.hf_engine import HFEngine

        self.engine = HFEngine(model, tokenizer, max_batch_size=max(64, len(prompts)))
        self.prompts = prompts
        self.sampling = SamplingConfig(
            max_new_tokens=max_new_tokens, temperature=0.0, stop_strings=[]
        )
        self.tokens: list[int] = []

    def __call__(self) -> float:
        t0 = time.perf_counter()
        gens = self.engine.generate(self.prompts, self.sampling)
        seconds = time.perf_counter() - t0
        self.tokens.append(sum(len(g.token_ids) for g in gens))
        return seconds


class BareRollout:
    """One left-padded ``model.generate`` call per ``__call__`` (sequences only)."""

    def __init__(self, model, tokenizer, prompts: list, max_new_tokens: int):
        self.model, self.prompts, self.max_new_tokens = model, prompts, max_new_tokens
        self.pad = tokenizer.pad_token_id
        self.end = sorted({tokenizer.eos_token_id, tokenizer.pad_token_id})
        self.tokens: list[int] = []

    @torch.no_grad()
    def __call__(self) -> float:
        t0 = time.perf_counter()
        width = max(len(p) for p in self.prompts)
        ids = torch.full((len(self.prompts), width), self.pad, dtype=torch.long)
        attn = torch.zeros_like(ids)
        for i, p in enumerate(self.prompts):
            ids[i, width - len(p) :] = torch.tensor(p)
            attn[i, width - len(p) :] = 1
        self.model.eval()
        out = self.model.generate(
            input_ids=ids, attention_mask=attn, max_new_tokens=self.max_new_tokens,
            do_sample=False, temperature=None, top_p=None, top_k=None,
            pad_token_id=self.pad, eos_token_id=self.end,
        )  # fmt: skip
        new = out[:, width:]
        is_end = torch.isin(new, torch.tensor(self.end))
        # tokens up to and including the first end token (all of them when none)
        first = torch.where(is_end.any(1), is_end.float().argmax(1) + 1, new.shape[1])
        seconds = time.perf_counter() - t0
        self.tokens.append(int(first.sum()))
        return seconds


def run_one(shape: GenerationShape, shared: bool) -> dict:
    """Alternate HFEngine and the bare loop on one prompt set; return figures."""
    from slca_lightning.models.policy import load_policy

    model, tokenizer = load_policy("tiny", seed=0)
    prompts = make_prompts(shape, len(tokenizer), shared)
    systems = {
        "hf_engine": EngineRollout(model, tokenizer, prompts, shape.max_new_tokens),
        "bare": BareRollout(model, tokenizer, prompts, shape.max_new_tokens),
    }
    secs = alternate(systems, rounds=shape.rounds, warmup=shape.warmup)
    rate = {n: [t / s for t, s in zip(systems[n].tokens[shape.warmup :], secs[n])] for n in systems}
    ratios = [a / b for a, b in zip(rate["hf_engine"], rate["bare"])]
    return {
        "shared": shared,
        "rows": len(prompts),
        "prompt_tokens": sum(len(p) for p in prompts),
        "new_tokens": {n: statistics.median(s.tokens) for n, s in systems.items()},
        "tokens_per_s": {n: statistics.median(v) for n, v in rate.items()},
        "ratio": paired_ratio(rate["hf_engine"], rate["bare"]),
        "ratio_spread": spread(ratios),
    }


def run(shape: GenerationShape) -> list[dict]:
    """Both prompt sets: distinct, then G=4 shared."""
    return [run_one(shape, shared=False), run_one(shape, shared=True)]
