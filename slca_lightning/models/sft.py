"""Supervised fine-tuning on demonstration transcripts (the warm start before RL).

:func:`build_sft_example` turns a chat into token ids and a loss mask by rendering the
conversation prefix by prefix with the tokenizer's chat template, the way
:class:`~slca_lightning.rollout.agent_loop.AgentLoop` builds episodes: the prompt and every
environment message are encoded as one piece each, each assistant turn's content as its
own piece, so SFT sees the same token boundaries the policy produces at rollout time.
:class:`SFTDataModule` serves the synthetic suite's demonstrations
(:func:`~slca_lightning.data.reference_answer`) and/or Toucan-1.5M SFT rows
(:mod:`slca_lightning.data.toucan_sft`); :class:`SFTModule` minimises the mean NLL of the
masked tokens.
"""

from __future__ import annotations

import random
from typing import Any

import lightning
import torch
from torch.utils.data import DataLoader

from slca_lightning.config.checks import check_args
from slca_lightning.logprobs.causal_lm import (
    common_prefix_len,
    sequence_logprobs,
    shared_prefix_logprobs,
)
from slca_lightning.models.loading import load_model
from slca_lightning.models.lora import LoraSettings, apply_lora
from slca_lightning.models.pretrained import fill_learning_rate

__all__ = [
    "SFTDataModule",
    "SFTModule",
    "TemplateRewriteError",
    "build_sft_example",
]


class TemplateRewriteError(ValueError):
    """The chat template renders an earlier part of the conversation differently later on."""


def _render(tokenizer: Any, messages: list[dict], generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=generation_prompt
    )


def _check_prefix(text: str, prefix: str, what: str) -> None:
    if not text.startswith(prefix):
        at = next((k for k, (a, b) in enumerate(zip(text, prefix)) if a != b), len(text))
        raise TemplateRewriteError(
            f"the chat template rewrites history at {what}: rendering more messages changed "
            f"the text at char {at} ({prefix[at : at + 40]!r} became {text[at : at + 40]!r}); "
            "prefix-diff loss masks need a template that only appends"
        )


def build_sft_example(tokenizer: Any, messages: list[dict]) -> tuple[list[int], list[bool]]:
    """Token ids of ``messages`` and a loss mask, True exactly on assistant-written tokens.

    Every assistant message is trained on: its content and, when the template closes the
    turn with the tokenizer's eos token (ChatML ``<|im_end|>``), that eos token, so the model
    learns to end its reply. System, user and tool messages and the template glue (role
    headers, newlines) get False. Works with any template that renders a longer
    conversation as an extension of a shorter one and writes assistant content verbatim.

    Raises:
        TemplateRewriteError: the template rewrites earlier turns or assistant content.
    """
    eos = tokenizer.eos_token or ""
    pieces: list[tuple[str, bool]] = []
    done = ""
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            text = _render(tokenizer, messages[: i + 1], False)
            _check_prefix(text, done, f"message {i} ({message['role']})")
            pieces.append((text[len(done) :], False))
            done = text
            continue
        content = message.get("content") or ""
        before = _render(tokenizer, messages[:i], True)
        _check_prefix(before, done, f"the header of assistant message {i}")
        after = _render(tokenizer, messages[: i + 1], False)
        _check_prefix(after, before + content, f"the content of assistant message {i}")
        closing = after[len(before) + len(content) :]
        pieces += [(before[len(done) :], False), (content, True)]
        if eos and closing.startswith(eos):
            pieces += [(eos, True), (closing[len(eos) :], False)]
        else:
            pieces.append((closing, False))
        done = after
    ids: list[int] = []
    mask: list[bool] = []
    pending = ""  # consecutive environment text is encoded as one piece, as in rollouts
    for text, trained in [*pieces, ("", True)]:
        if not trained:
            pending += text
            continue
        for chunk, flag in ((pending, False), (text, True)):
            if chunk:
                new = tokenizer.encode(chunk, add_special_tokens=False)
                ids += new
                mask += [flag] * len(new)
        pending = ""
    return ids, mask


class _GroupedBatches(torch.utils.data.Sampler):
    """Batches inside groups of equal key (same system prompt); pass ``e`` of the data is
    shuffled by ``Random(seed + e)``, so fresh runs see the same order."""

    def __init__(self, keys: list[str], batch_size: int, seed: int):
        self.groups: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            self.groups.setdefault(key, []).append(i)
        self.batch_size, self.seed, self.epoch = batch_size, seed, 0

    def __iter__(self):
        rng, out, n = random.Random(self.seed + self.epoch), [], self.batch_size
        self.epoch += 1
        for key in sorted(self.groups):
            idx = rng.sample(self.groups[key], len(self.groups[key]))
            out += [idx[i : i + n] for i in range(0, len(idx), n)]
        rng.shuffle(out)
        return iter(out)

    def __len__(self) -> int:
        return sum(-(-len(g) // self.batch_size) for g in self.groups.values())


class SFTDataModule(lightning.LightningDataModule):
    """Right-padded batches of demonstrations for :class:`SFTModule`.

    Demonstrations are ``n_tasks`` synthetic tasks, ``SyntheticTaskGenerator(seed)
    .generate(n_tasks)`` (for the same seed, its first tasks are the RL train split), each
    with its :func:`~slca_lightning.data.reference_answer` transcript, plus, when
    ``toucan_sft_path`` is set, the rows of that Toucan-1.5M SFT JSONL file (the released
    format; :func:`~slca_lightning.data.toucan_sft.sft_messages` turns each into a chat:
    hermes system prompt listing the row's tools, user turns, assistant turns with
    ``<tool_call>`` blocks, tool responses). Set ``n_tasks=0`` to train on Toucan rows only.
    A malformed row raises :class:`~slca_lightning.data.toucan_sft.ToucanSFTFormatError`
    naming the file, the line and the field. Examples longer than ``max_tokens`` are left
    out (counted in :attr:`skipped`). A ``string_arguments_fraction`` of the synthetic
    demonstrations (drawn per task, seeded) write their calls' arguments as a JSON string,
    as OpenAI-format logs store them: demonstrations pooled from two sources, one of which
    the agent loop rejects (the ``suite-pooled-sft`` warm start). Batches are dicts of
    ``input_ids`` (LongTensor[B, T], pad id), ``attention_mask`` and ``loss_mask``
    (BoolTensor[B, T]). With ``group_by_prompt`` a batch holds tasks of one system prompt
    (the tool listing), so :class:`SFTModule` can run that shared prefix once. The
    tokenizer may come late through :meth:`connect` (:class:`SFTModule` does so in
    ``configure_model``). Batch order is seeded.
    """

    def __init__(
        self,
        tokenizer: Any = None,
        n_tasks: int = 480,
        seed: int = 0,
        batch_size: int = 8,
        group_by_prompt: bool = True,
        toucan_sft_path: str | None = None,
        toucan_limit: int | None = None,
        max_tokens: int | None = None,
        skip: tuple[int, int] | None = None,
        string_arguments_fraction: float = 0.0,
    ):
        check_args(SFTDataModule, locals())
        super().__init__()
        if skip is not None and not (0 <= skip[0] <= skip[1]):
            raise ValueError(f"SFTDataModule.skip must be (lo, hi) with 0 <= lo <= hi, got {skip}")
        self.skip = tuple(skip) if skip is not None else None
        self.tokenizer = tokenizer
        self.n_tasks, self.seed, self.batch_size = n_tasks, seed, batch_size
        self.group_by_prompt = group_by_prompt
        self.toucan_sft_path, self.toucan_limit = toucan_sft_path, toucan_limit
        self.max_tokens = max_tokens
        self.string_arguments_fraction = string_arguments_fraction
        self.examples: list[tuple[list[int], list[bool]]] | None = None
        self.keys: list[str] = []
        self.skipped = 0

    def connect(self, tokenizer: Any) -> None:
        """Give the tokenizer (examples are built on first use)."""
        self.tokenizer = tokenizer

    def _build(self) -> list[tuple[list[int], list[bool]]]:
        if self.tokenizer is None:
            raise RuntimeError("SFTDataModule has no tokenizer: pass one or call connect()")
        from slca_lightning.data import SyntheticTaskGenerator, builtin_suite, reference_answer

        suite = builtin_suite()
        n = self.n_tasks
        lo, hi = self.skip if self.skip is not None and self.skip[0] < n else (n, n)
        drawn = SyntheticTaskGenerator(self.seed, suite=suite).generate(n + hi - lo)
        tasks = drawn[:lo] + drawn[hi:]
        pooled = random.Random(f"string-arguments-{self.seed}")  # one draw per task, in order
        chats = [
            (
                f"task {t.task_id}",
                t.messages
                + reference_answer(
                    t, suite, string_arguments=pooled.random() < self.string_arguments_fraction
                ),
            )
            for t in tasks
        ]
        if self.toucan_sft_path is not None:
            from slca_lightning.data.toucan_sft import load_toucan_sft, sft_messages

            rows = load_toucan_sft(self.toucan_sft_path, self.toucan_limit)
            chats += [(f"{row.path}, line {row.line}", sft_messages(row)) for row in rows]
        if not chats:
            raise ValueError("SFTDataModule has no demonstrations: n_tasks=0 and no rows")
        examples, self.keys, self.skipped = [], [], 0
        for origin, chat in chats:
            try:
                ids, mask = build_sft_example(self.tokenizer, chat)
            except TemplateRewriteError as exc:
                raise TemplateRewriteError(f"{origin}: {exc}") from exc
            if self.max_tokens is not None and len(ids) > self.max_tokens:
                self.skipped += 1
                continue
            examples.append((ids, mask))
            self.keys.append(chat[0]["content"] if chat[0]["role"] == "system" else "")
        if not examples:
            raise ValueError(f"every demonstration is longer than max_tokens={self.max_tokens}")
        return examples

    def setup(self, stage: str | None = None) -> None:
        if self.examples is None and self.tokenizer is not None:
            self.examples = self._build()

    def collate(self, rows: list[tuple[list[int], list[bool]]]) -> dict[str, torch.Tensor]:
        """Right-pad ``(ids, mask)`` rows into a batch dict."""
        pad = self.tokenizer.pad_token_id
        pad = pad if pad is not None else self.tokenizer.eos_token_id
        width = max(len(ids) for ids, _ in rows)
        input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
        attention, loss_mask = (torch.zeros((len(rows), width), dtype=torch.bool) for _ in "ab")
        for b, (ids, mask) in enumerate(rows):
            input_ids[b, : len(ids)] = torch.tensor(ids)
            loss_mask[b, : len(ids)] = torch.tensor(mask)
            attention[b, : len(ids)] = True
        return {"input_ids": input_ids, "attention_mask": attention, "loss_mask": loss_mask}

    def train_dataloader(self) -> DataLoader:
        if self.examples is None:
            self.examples = self._build()
        keys = self.keys if self.group_by_prompt else [""] * len(self.examples)
        sampler = _GroupedBatches(keys, self.batch_size, self.seed)
        return DataLoader(self.examples, batch_sampler=sampler, collate_fn=self.collate)


class SFTModule(lightning.LightningModule):
    """Causal-LM SFT: mean negative log-likelihood over the ``loss_mask`` tokens.

    The model comes from :func:`~slca_lightning.models.loading.load_model` in ``configure_model``
    (with LoRA when ``lora`` is set), which also connects the tokenizer to the trainer's
    datamodule when that has none. AdamW (betas 0.9, 0.95) on the trainable parameters at
    ``learning_rate`` (null, the default: the model's own,
    :func:`~slca_lightning.models.pretrained.default_learning_rate`: 3e-3 from scratch, 2e-4 for
    the built-in warm starts, a named source's, 1e-5 for any other, pretrained, model);
    the learning rate ramps up linearly over ``warmup_steps``, then decays linearly to
    ``final_lr_fraction`` of itself at ``decay_steps`` (None: the trainer's ``max_steps``;
    ``final_lr_fraction`` 1.0: held). A fixed ``decay_steps`` makes the weights after k
    steps independent of how long the run is (a run stopped early is a prefix of a longer
    one: the built-in warm starts select a step this way). Rows that
    share ≥ ``share_prefix`` leading tokens (0: never) run that prefix once
    (:func:`~slca_lightning.logprobs.causal_lm.shared_prefix_logprobs`; same loss). ``context_weight``
    > 0 adds that weight times the mean NLL of the other (prompt, tool) tokens, an
    auxiliary language-modelling signal for models trained from scratch (0: pure SFT).
    Logs ``sft/loss`` (the masked NLL), ``sft/tokens`` (loss tokens in the batch) and,
    when used, ``sft/context_loss``. With ``output_dir`` the trained model (LoRA merged)
    and its tokenizer are written there as an HF folder at the end of the fit
    (:func:`~slca_lightning.models.export.export_policy`), for ``model:`` of an RL config.
    ``gradient_checkpointing`` recomputes each decoder layer's activations in backward
    (transformers' ``gradient_checkpointing_enable``, non-reentrant): less memory for
    long demonstrations, more compute; rows then never share their prefix (a checkpointed
    model keeps no KV cache while training).
    """

    #: the ``slca sft`` progress bar's label
    progress_label = "SFT"

    def __init__(
        self,
        model: str = "tiny",
        learning_rate: float | None = None,
        weight_decay: float = 0.0,
        warmup_steps: int = 10,
        lora: LoraSettings | None = None,
        dtype: str = "float32",
        seed: int = 0,
        chunk_size: int = 1024,
        share_prefix: int = 256,
        context_weight: float = 0.0,
        final_lr_fraction: float = 1.0,
        output_dir: str | None = None,
        gradient_checkpointing: bool = False,
        decay_steps: int | None = None,
    ):
        check_args(SFTModule, locals())
        super().__init__()
        self.save_hyperparameters()
        fill_learning_rate(self.hparams, "sft")  # null: the model's own rate
        self.model: Any = None
        self.tokenizer: Any = None

    def configure_model(self) -> None:
        if self.model is not None:
            return
        hp = self.hparams
        model, self.tokenizer = load_model(hp.model, dtype=hp.dtype, seed=hp.seed)
        lora = LoraSettings(**hp.lora) if isinstance(hp.lora, dict) else hp.lora
        if hp.gradient_checkpointing:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
            model.config.use_cache = False
        # from_pretrained returns eval mode: train mode before Lightning's fit loop checks it
        self.model = (apply_lora(model, lora) if lora is not None else model).train()
        data = getattr(self._trainer, "datamodule", None) if self._trainer else None
        if hasattr(data, "connect") and getattr(data, "tokenizer", None) is None:
            data.connect(self.tokenizer)

    def on_train_start(self) -> None:
        # train mode while training (again after any evaluation; gradient checkpointing
        # applies in train mode only)
        if self.model is not None:
            self.model.train()

    def on_fit_end(self) -> None:
        out = self.hparams.output_dir
        if not out or self.model is None or not self.trainer.is_global_zero:
            return
        from slca_lightning.models.export import export_policy

        info = {"from": self.hparams.model, "stage": "sft", "steps": int(self.global_step)}
        info["hyper_parameters"] = dict(self.hparams)
        path = export_policy(self.model, self.tokenizer, out, info)
        print(f"SFT model written to {path} (model: {path} in an RL config)")

    def loss(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Objective of a batch: ``{"loss", "nll", "tokens", "context_nll"}``.

        ``nll`` is the mean NLL over the ``loss_mask`` tokens (``tokens`` of them),
        ``context_nll`` the mean NLL over the other real tokens (position 0 excluded) and
        ``loss = nll + context_weight · context_nll`` (just ``nll`` by default).
        """
        ids, attention = batch["input_ids"], batch["attention_mask"].bool()
        mask = batch["loss_mask"].bool() & attention
        prefix = min(common_prefix_len(ids, attention), ids.shape[1] - 1)
        share = self.hparams.share_prefix
        # a checkpointed model keeps no KV cache in training: no prefix to share
        share = 0 if self.hparams.gradient_checkpointing else share
        if share and ids.shape[0] > 1 and prefix >= share:
            logp = shared_prefix_logprobs(self.model, ids, attention, prefix)  # [B, T]
        else:
            logp = sequence_logprobs(self.model, ids, attention, chunk_size=self.hparams.chunk_size)
        n = mask.sum()
        nll = -(logp * mask).sum() / n.clamp(min=1)
        context = attention & ~mask
        context[:, 0] = False
        context_nll = -(logp * context).sum() / context.sum().clamp(min=1)
        w = self.hparams.context_weight
        loss = nll + w * context_nll if w else nll
        return {"loss": loss, "nll": nll, "tokens": n, "context_nll": context_nll.detach()}

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        out = self.loss(batch)
        size = batch["input_ids"].shape[0]
        self.log("sft/loss", out["nll"], prog_bar=True, batch_size=size)
        self.log("sft/tokens", out["tokens"].float(), batch_size=size)
        if self.hparams.context_weight:
            self.log("sft/context_loss", out["context_nll"], batch_size=size)
        return out["loss"]

    def configure_optimizers(self) -> Any:
        hp = self.hparams
        params = [p for p in self.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, hp.learning_rate, (0.9, 0.95), weight_decay=hp.weight_decay)
        warm, final = max(int(hp.warmup_steps), 0), float(hp.final_lr_fraction)
        total = self._trainer.max_steps if self._trainer is not None else -1
        total = hp.decay_steps if hp.decay_steps is not None else total

        def factor(step: int) -> float:
            ramp = min(1.0, (step + 1) / (warm + 1))
            if total is None or total <= 0:
                return ramp
            return min(ramp, final + (1.0 - final) * max(0.0, 1.0 - step / total))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
