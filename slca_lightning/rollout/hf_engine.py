"""In-process Hugging Face sampler that shares the policy's weights.

Generation runs under ``no_grad`` with the model in eval mode (restored afterwards), then
cuts every row at its first EOS / pad token or at the completion of a stop string. Two
decoders:

- ``"loop"`` (default), :mod:`.hf_decode`: the KV cache is written in place, rows that
  ended leave the batch, and with ``share_prefix=True`` the rows are grouped by shared
  prefix (:func:`.prefixes.plan_groups`: identical prompts, a task's rollouts in later
  turns), each group's prefix is prefilled once as one row and copied into the batch cache,
  and all rows decode as one batch. Log-probs are ``log_softmax(logits / T)`` of the raw
  logits at the sampled token, in float32.
- ``"generate"``: ``model.generate`` on left-padded prompts (with ``share_prefix=True``, one
  call per cluster of :func:`.prefixes.prefix_clusters`, laid out ``[prefix | padding |
  own suffix]`` over one prefilled prefix cache); log-probs recomputed from the returned
  logits the same way.

Either way positions follow the attention mask, so the samples' distribution is that of
each row alone, and the log-probs match what the trainer computes for the same temperature.

Sampling draws from exactly that distribution: ``generate`` runs with a neutral generation
config in place of the model's own (instruct models ship ``repetition_penalty``,
``no_repeat_ngram_size``, ``top_k`` … in ``generation_config.json``, which transformers
would otherwise apply on top of the arguments given), with ``top_k=0`` and the given
``top_p``. The trainer scores the untruncated ``softmax(logits / T)``, so ``top_p < 1``
is refused at configuration time by the data module (an importance ratio against a
truncated sampler is biased). With ``check_distribution`` the processed scores that were
sampled from are compared with ``softmax(logits / T)`` at every step and the largest
absolute probability difference is kept in :attr:`distribution_gap` (greedy: the argmax
of both is compared as well).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn

from slca_lightning.config.checks import check_args
from slca_lightning.logprobs.causal_lm import base_model
from slca_lightning.rollout.engine import Generation, RolloutEngine, SamplingConfig
from slca_lightning.rollout.hf_decode import cache_name, keep_last, sampled_gap
from slca_lightning.rollout.prefixes import plan_groups, prefix_clusters


class HFEngine(RolloutEngine):
    """Samples with the policy module itself, so weights are always the latest.

    Args:
        model: a Hugging Face causal LM (the policy; shared, never copied).
        tokenizer: its tokenizer (pad/eos ids, stop-string detection).
        max_batch_size: rows per ``generate`` call.
        share_prefix: prefill a prefix shared by several prompts once (see module docstring;
            every shipped config turns it on). Off by default: with ``decoder="generate"``
            each cluster is its own ``generate`` call, and on the tiny CPU model those extra
            decode loops cost more than the saved prefill (0.75x the tokens/s of one plain
            batch for 16 rows of 1000-token prompts, G = 4; ``benchmarks/run_all.py``).
        min_shared_prefix: the shortest shared prefix (tokens) worth a cluster of its own.
        check_distribution: also return the processed scores and record in
            :attr:`distribution_gap` how far the sampled-from distribution is from
            ``softmax(logits / T)`` (a check for tests; costs a copy of the logits). It
            audits ``generate``'s logits processors, so it runs that path.
        decoder: ``"loop"`` (default): the engine's own loop (:mod:`.hf_decode`), which
            samples ``softmax(logits / T)`` by construction, writes the KV cache in place
            and drops finished rows (SmolLM2-135M, 32 rows: see ``benchmarks/README.md``);
            ``"generate"``: transformers' ``model.generate``. ``top_p < 1`` always runs
            ``generate`` (the loop does not truncate).
        prune_fraction: the loop drops ended rows from the batch once at least this share
            of the rows still in it have ended (each drop copies the cache once).
        shared_prefix_attention: with ``share_prefix`` and the loop, keep each group's
            prefix keys and values once instead of copying them into every row, and read
            them once per step for all the rows that share them (cascade attention over a
            tree of prefix segments: the tasks' common system prompt and tool schemas too,
            :mod:`.shared_prefix_attention`); the same tokens and log-probs up to float
            rounding. Models whose attention modules take a registered attention function
            (Llama, Qwen2, Mistral …); others decode as without it.
    """

    def __init__(
        self,
        model: nn.Module | None = None,
        tokenizer: Any = None,
        max_batch_size: int = 64,
        share_prefix: bool = False,
        min_shared_prefix: int = 64,
        check_distribution: bool = False,
        decoder: str = "loop",
        prune_fraction: float = 0.25,
        shared_prefix_attention: bool = False,
    ):
        check_args(HFEngine, locals(), "data.engine.init_args")
        if decoder not in ("loop", "generate"):
            raise ValueError(
                f"data.engine.init_args.decoder={decoder!r}: expected 'loop' or 'generate'"
            )
        self.decoder = decoder
        self.prune_fraction = prune_fraction
        self.shared_prefix_attention = shared_prefix_attention
        self.model = model
        self.check_distribution = check_distribution
        self.distribution_gap = 0.0
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.share_prefix = share_prefix
        self.min_shared_prefix = min_shared_prefix
        self.policy_version = 0

    def bind(self, model: nn.Module, tokenizer: Any) -> None:
        """Attach the policy and tokenizer (done by the module once they exist)."""
        self.model, self.tokenizer = model, tokenizer

    def _end_ids(self) -> set[int]:
        ids = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id}
        return {i for i in ids if i is not None}

    def _stop_token_ids(self, stop_strings: list[str]) -> dict[int, str]:
        out = {}
        for s in stop_strings:
            ids = self.tokenizer.encode(s, add_special_tokens=False)
            if len(ids) == 1:
                out[ids[0]] = s
        return out

    def _stop_at(
        self,
        ids: list[int],
        t: int,
        stop_strings: list[str],
        stop_ids: dict[int, str],
        end_ids: set[int],
    ) -> str | None:
        """Why the row stops at token ``t`` (``"eos"`` or the stop string), or None."""
        tok = ids[t]
        if tok in end_ids:
            return "eos"
        if tok in stop_ids:
            return stop_ids[tok]
        if stop_strings and len(stop_ids) < len(stop_strings):
            tail = self.tokenizer.decode(ids[max(0, t - 15) : t + 1], skip_special_tokens=False)
            for s in stop_strings:
                if s not in stop_ids.values() and s in tail:
                    return s
        return None

    def _cut(
        self, ids: list[int], stop_strings: list[str], stop_ids: dict[int, str]
    ) -> tuple[int, str | None]:
        """Length to keep and why it stopped (None = reached the cap)."""
        end_ids = self._end_ids()
        for t in range(len(ids)):
            why = self._stop_at(ids, t, stop_strings, stop_ids, end_ids)
            if why is not None:
                return t + 1, why
        return len(ids), None

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Generation]:
        if self.model is None or self.tokenizer is None:
            raise RuntimeError("HFEngine has no model/tokenizer: call bind(model, tokenizer) first")
        out: list[Generation | None] = [None] * len(prompts)
        if self._uses_loop(sampling):  # one batch across groups, each prefix prefilled once
            order = sorted(range(len(prompts)), key=lambda i: prompts[i])  # groups contiguous
            for start in range(0, len(order), self.max_batch_size):
                chunk = order[start : start + self.max_batch_size]
                mine = [prompts[i] for i in chunk]
                groups = (
                    plan_groups(mine, self.min_shared_prefix)
                    if self.share_prefix
                    else [(list(range(len(mine))), 0)]
                )
                for i, g in zip(chunk, self._loop(mine, groups, sampling), strict=True):
                    out[i] = g
            return out  # type: ignore[return-value]
        clusters = (
            prefix_clusters(prompts, self.min_shared_prefix)
            if self.share_prefix
            else [(list(range(len(prompts))), 0)]
        )
        for rows, shared_len in clusters:
            for start in range(0, len(rows), self.max_batch_size):
                chunk = rows[start : start + self.max_batch_size]
                gens = self._generate([prompts[i] for i in chunk], sampling, shared_len)
                for i, g in zip(chunk, gens):
                    out[i] = g
        return out  # type: ignore[return-value]

    def _uses_loop(self, sampling: SamplingConfig) -> bool:
        """The engine's own loop, unless ``generate`` is asked for, audited or needed
        (``top_p < 1``)."""
        greedy = sampling.temperature <= 0
        return (
            self.decoder == "loop"
            and not self.check_distribution
            and (greedy or sampling.top_p >= 1.0)
        )

    def _generations(
        self, rows: list[list[int]], logps: list[list[float]], sampling: SamplingConfig
    ) -> list[Generation]:
        stop_ids = self._stop_token_ids(sampling.stop_strings)
        gens = []
        for ids, logp in zip(rows, logps, strict=True):
            n, why = self._cut(ids, sampling.stop_strings, stop_ids)
            gens.append(
                Generation(
                    token_ids=ids[:n],
                    logprobs=logp[:n],
                    finish_reason="stop" if why else "length",
                    stop_reason=why,
                )
            )
        return gens

    def _generate(
        self, prompts: list[list[int]], sampling: SamplingConfig, shared: int = 0
    ) -> list[Generation]:
        if not prompts:
            return []
        tok = self.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        if len(prompts) < 2:
            shared = 0
        shared = min(shared, *(len(p) - 1 for p in prompts))  # every row keeps a suffix token
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            if p:  # [shared prefix | padding | own suffix]: suffixes end-aligned
                input_ids[i, :shared] = torch.tensor(p[:shared], dtype=torch.long)
                attention[i, :shared] = 1
                input_ids[i, width - len(p) + shared :] = torch.tensor(p[shared:])
                attention[i, width - len(p) + shared :] = 1
        rows, logps = self._hf_generate(input_ids, attention, shared, sampling, width)
        return self._generations(rows, logps, sampling)

    def _loop(
        self,
        prompts: list[list[int]],
        groups: list[tuple[list[int], int]],
        sampling: SamplingConfig,
    ) -> list[Generation]:
        """The engine's own loop (:func:`.hf_decode.sample_loop`), seeded like ``generate``."""
        from slca_lightning.rollout.hf_decode import sample_loop

        model, tok = self.model, self.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        stop_strings = list(sampling.stop_strings)
        stop_ids = self._stop_token_ids(stop_strings)
        end_ids = self._end_ids()

        def ended(ids: list[int]) -> str | None:
            return self._stop_at(ids, len(ids) - 1, stop_strings, stop_ids, end_ids)

        with seeded_eval(model, sampling.seed):
            rows, logps, reasons = sample_loop(
                model,
                prompts,
                groups,
                pad=pad,
                max_new_tokens=sampling.max_new_tokens,
                temperature=sampling.temperature,
                ended=ended,
                cache_name=cache_name(model),
                keep_last=keep_last(model),
                prune_fraction=self.prune_fraction,
                shared_prefix_attention=self.shared_prefix_attention,
                min_shared_prefix=self.min_shared_prefix,
            )
        return [  # rows already end where they stopped: no second pass of _cut
            Generation(
                token_ids=ids,
                logprobs=logp,
                finish_reason="stop" if why else "length",
                stop_reason=why,
            )
            for ids, logp, why in zip(rows, logps, reasons, strict=True)
        ]

    def _hf_generate(
        self,
        input_ids: torch.Tensor,
        attention: torch.Tensor,
        shared: int,
        sampling: SamplingConfig,
        width: int,
    ) -> tuple[list[list[int]], list[list[float]]]:
        """``model.generate`` with a neutral generation config and an in-place KV cache."""
        from slca_lightning.rollout.kv_cache import growing_cache

        model, tok = self.model, self.tokenizer
        device = next(model.parameters()).device
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        extra: dict[str, Any] = {}
        cache = growing_cache(model, width + sampling.max_new_tokens)
        if cache is not None:
            extra[cache_name(model)] = cache
        if shared > 0:
            was_training = model.training
            model.eval()
            try:
                prefill = model(
                    input_ids=input_ids[:1, :shared].to(device),
                    use_cache=True,
                    **extra,
                    **keep_last(model),
                )  # the cache is what is kept; logits of the last position only
            finally:
                model.train(was_training)
            cache = getattr(prefill, cache_name(model))
            cache.batch_repeat_interleave(input_ids.shape[0])
            extra[cache_name(model)] = cache
        greedy = sampling.temperature <= 0
        kwargs: dict[str, Any] = dict(
            input_ids=input_ids.to(device),
            attention_mask=attention.to(device),
            max_new_tokens=sampling.max_new_tokens,
            do_sample=not greedy,
            return_dict_in_generate=True,
            output_logits=True,
            pad_token_id=pad,
            eos_token_id=sorted(self._end_ids()),
            **extra,
        )
        if not greedy:
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
        else:  # greedy: no warper runs (the neutral config adds no processor either)
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if sampling.stop_strings:
            kwargs.update(stop_strings=list(sampling.stop_strings), tokenizer=tok)
        if self.check_distribution:
            kwargs["output_scores"] = True
        with seeded_eval(model, sampling.seed), neutral_generation_config(model):
            result = model.generate(**kwargs)
        new_ids = result.sequences[:, width:].cpu()  # [b, n]
        if result.logits:
            scale = 1.0 if greedy else sampling.temperature
            # step by step: one [b, V] float32 at a time, never a [b, n, V] stack (and its
            # log-softmax copy): 1.2 GB less at 32 rows × 96 tokens of a 49k vocabulary
            logp = torch.stack(
                [
                    torch.log_softmax(step.float().cpu() / scale, dim=-1)
                    .gather(-1, new_ids[:, t, None])
                    .squeeze(-1)
                    for t, step in enumerate(result.logits)
                ],
                dim=1,
            )  # [b, n]
            if self.check_distribution:
                logits = torch.stack(result.logits, dim=1).float().cpu()  # [b, n, V]
                gap = sampled_gap(
                    torch.stack(result.scores, dim=1).float().cpu(),
                    logits,
                    new_ids,
                    self._end_ids(),
                    greedy,
                    sampling.temperature,
                )
                self.distribution_gap = max(self.distribution_gap, gap)
        else:
            logp = torch.zeros(new_ids.shape)
        return new_ids.tolist(), logp.tolist()


@contextlib.contextmanager
def seeded_eval(model: nn.Module, seed: int | None):
    """The model in eval mode (its mode restored afterwards) and, with a seed, torch's CPU
    random stream seeded and restored: a seeded call draws the same samples every time."""
    was_training = model.training
    model.eval()
    rng = torch.random.fork_rng(devices=[]) if seed is not None else contextlib.nullcontext()
    try:
        with rng:
            if seed is not None:
                torch.manual_seed(seed)
            yield
    finally:
        model.train(was_training)


@contextlib.contextmanager
def neutral_generation_config(model: nn.Module):
    """Swap the model's ``generation_config`` for one without any sampling defaults (no
    repetition penalty, n-gram ban, top-k …; only its token ids), restored afterwards."""
    from transformers import GenerationConfig

    base = base_model(model)
    holders = [
        m for m in {id(model): model, id(base): base}.values() if hasattr(m, "generation_config")
    ]
    saved = [m.generation_config for m in holders]
    old = saved[0] if saved else None
    ids = {
        k: getattr(old, k, None)
        for k in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
    }
    neutral = GenerationConfig(**{k: v for k, v in ids.items() if v is not None})
    for m in holders:
        m.generation_config = neutral
    try:
        yield neutral
    finally:
        for m, g in zip(holders, saved, strict=True):
            m.generation_config = g
