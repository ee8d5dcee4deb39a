"""In-process Hugging Face sampler that shares the policy's weights.

Generation runs ``model.generate`` on left-padded prompts under ``no_grad`` with the model
in eval mode (restored afterwards), then cuts every row at its first EOS / pad token or at
the completion of a stop string. Log-probs are recomputed from the returned logits as
``log_softmax(logits / temperature)`` at the sampled token, in float32, so they match what
the trainer computes for the same temperature.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn

from slca_lightning.rollout.engine import Generation, RolloutEngine, SamplingConfig


class HFEngine(RolloutEngine):
    """Samples with the policy module itself, so weights are always the latest.

    Args:
        model: a Hugging Face causal LM (the policy; shared, never copied).
        tokenizer: its tokenizer (pad/eos ids, stop-string detection).
        max_batch_size: rows per ``generate`` call.
    """

    def __init__(
        self, model: nn.Module | None = None, tokenizer: Any = None, max_batch_size: int = 64
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
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

    def _cut(
        self, ids: list[int], stop_strings: list[str], stop_ids: dict[int, str]
    ) -> tuple[int, str | None]:
        """Length to keep and why it stopped (None = reached the cap)."""
        end_ids = self._end_ids()
        for t, tok in enumerate(ids):
            if tok in end_ids:
                return t + 1, "eos"
            if tok in stop_ids:
                return t + 1, stop_ids[tok]
            if stop_strings and len(stop_ids) < len(stop_strings):
                tail = self.tokenizer.decode(ids[max(0, t - 15) : t + 1], skip_special_tokens=False)
                for s in stop_strings:
                    if s not in stop_ids.values() and s in tail:
                        return t + 1, s
        return len(ids), None

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Generation]:
        if self.model is None or self.tokenizer is None:
            raise RuntimeError("HFEngine has no model/tokenizer: call bind(model, tokenizer) first")
        out: list[Generation] = []
        for start in range(0, len(prompts), self.max_batch_size):
            out.extend(self._generate(prompts[start : start + self.max_batch_size], sampling))
        return out

    def _generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Generation]:
        if not prompts:
            return []
        model, tok = self.model, self.tokenizer
        device = next(model.parameters()).device
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            if p:
                input_ids[i, width - len(p) :] = torch.tensor(p)
                attention[i, width - len(p) :] = 1
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
        )
        if not greedy:
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if sampling.stop_strings:
            kwargs.update(stop_strings=list(sampling.stop_strings), tokenizer=tok)
        was_training = model.training
        model.eval()
        rng = (
            torch.random.fork_rng(devices=[])
            if sampling.seed is not None
            else contextlib.nullcontext()
        )
        try:
            with rng:
                if sampling.seed is not None:
                    torch.manual_seed(sampling.seed)
                result = model.generate(**kwargs)
        finally:
            model.train(was_training)
        new_ids = result.sequences[:, width:].cpu()  # [b, n]
        if result.logits:
            logits = torch.stack(result.logits, dim=1).float().cpu()  # [b, n, V]
            scale = 1.0 if greedy else sampling.temperature
            logp = torch.log_softmax(logits / scale, dim=-1)
            logp = logp.gather(-1, new_ids[:, : logits.shape[1], None]).squeeze(-1)  # [b, n]
        else:
            logp = torch.zeros(new_ids.shape)
        stop_ids = self._stop_token_ids(sampling.stop_strings)
        gens = []
        for i in range(len(prompts)):
            ids = new_ids[i].tolist()
            n, why = self._cut(ids, sampling.stop_strings, stop_ids)
            gens.append(
                Generation(
                    token_ids=ids[:n],
                    logprobs=logp[i, :n].tolist(),
                    finish_reason="stop" if why else "length",
                    stop_reason=why,
                )
            )
        return gens
