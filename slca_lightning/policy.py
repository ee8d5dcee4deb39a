"""The policy: load a causal LM + tokenizer, add LoRA, score sequences, warm-start it.

- :func:`load_policy` gives ``(model, tokenizer)`` for ``"tiny"`` (a random tiny Qwen2 on
  the offline tiny tokenizer), ``"tiny-sft"`` (that model after the cached SFT warm start
  of :func:`warm_start`) or a local Hugging Face folder (never the hub).
- :func:`sequence_logprobs` gives ``log π(x_t | x_<t)`` aligned with ``input_ids``
  (ARCHITECTURE "The training step" 4: chunked, no float32 ``[B, T, V]``).
- :func:`warm_start` runs SFT (:mod:`slca_lightning.sft`) of the tiny model on
  demonstrations of the synthetic suite and caches the result on disk.

Tokenizers come back with a pad token (the eos token when they have none) and
``padding_side="right"``, the layout of training batches; generation code left-pads its
prompts itself (:mod:`slca_lightning.rollout.hf_engine`).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from slca_lightning.cache import default_cache_dir, is_complete, save_model_folder
from slca_lightning.logprobs import DEFAULT_CHUNK_SIZE, token_logprobs, token_logprobs_from_hidden

__all__ = [
    "TINY_HIDDEN_SIZE",
    "TINY_NUM_LAYERS",
    "LoraSettings",
    "apply_lora",
    "common_prefix_len",
    "default_cache_dir",
    "grouped_logprobs",
    "load_policy",
    "rollout_weights",
    "sequence_logprobs",
    "shard_fsdp2",
    "shared_prefix_logprobs",
    "warm_start",
]

log = logging.getLogger(__name__)

#: Size of the ``"tiny"`` model: Qwen2, hidden 128, 4 layers, 4 heads (2 KV heads), MLP 256,
#: tied embeddings over the 518-token tiny vocabulary: 0.66 M parameters.
TINY_HIDDEN_SIZE = 128
TINY_NUM_LAYERS = 4

#: The built-in models :func:`load_policy` builds by name (each also as ``"<name>-sft"``).
BUILTIN_MODELS = ("tiny", "suite")

#: Warm-start defaults of the tiny model (measured on 2 CPU cores, see :func:`warm_start`).
WARM_START_STEPS = 300
WARM_START_TASKS = 480
WARM_START_BATCH_SIZE = 8
WARM_START_LR = 5e-3
#: Recipe fixed by the warm start (part of the cache key): weight of the auxiliary
#: NLL on prompt/tool tokens, linear decay to 10% of the learning rate, warmup steps.
WARM_START_RECIPE = {"context_weight": 1.0, "final_lr_fraction": 0.1, "warmup_steps": 10}

#: Per built-in model: SFT steps, demonstrations, batch size, learning rate, the fixed
#: recipe, and the task indices left out of the demonstrations (``skip``: the RL held-out
#: split ``[256, 512)`` of ``SyntheticTasks(seed=0, n_train=256)``, any ``n_heldout`` ≤ 256).
#: The suite model's budget is fixed by held-out demonstration loss alone
#: (``experiments/warm_start/README.md``), never by what RL does afterwards.
WARM_STARTS: dict[str, dict[str, Any]] = {
    "tiny": {
        "steps": WARM_START_STEPS,
        "n_tasks": WARM_START_TASKS,
        "batch_size": WARM_START_BATCH_SIZE,
        "learning_rate": WARM_START_LR,
        "recipe": WARM_START_RECIPE,
        "skip": None,
    },
    "suite": {
        "steps": 600,
        "n_tasks": 1024,
        "batch_size": 16,
        "learning_rate": 2e-3,
        "recipe": {"context_weight": 1.0, "final_lr_fraction": 0.1, "warmup_steps": 20},
        "skip": (256, 512),
    },
}

_DONE_FILE = "slca_warm_start.json"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoraSettings:
    """LoRA adapter settings for :func:`apply_lora` (rank, scale ``alpha / r``, targets)."""

    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: str | list[str] = "all-linear"


def apply_lora(model: Any, settings: LoraSettings | None = None) -> Any:
    """Wrap ``model`` in a peft LoRA model: only the adapter weights stay trainable."""
    from peft import LoraConfig, get_peft_model

    s = settings if settings is not None else LoraSettings()
    kw = {"lora_alpha": s.alpha, "lora_dropout": s.dropout, "target_modules": s.target_modules}
    return get_peft_model(model, LoraConfig(r=s.r, task_type="CAUSAL_LM", **kw))


def _dtype(dtype: str) -> Any:
    if dtype != "auto" and dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {[*_DTYPES, 'auto']}")
    return _DTYPES.get(dtype, "auto")


def _finish_tokenizer(tokenizer: Any) -> Any:
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    return tokenizer


def _build_builtin(name: str, seed: int) -> tuple[Any, Any]:
    if name == "tiny":
        from slca_lightning.models.tiny import build_tiny_model, build_tiny_tokenizer

        tokenizer = build_tiny_tokenizer()
        return build_tiny_model(tokenizer, TINY_HIDDEN_SIZE, TINY_NUM_LAYERS, seed=seed), tokenizer
    from slca_lightning.models.suite import build_suite_model, build_suite_tokenizer

    tokenizer = build_suite_tokenizer()
    return build_suite_model(tokenizer, seed=seed), tokenizer


def load_policy(model: str, dtype: str = "float32", seed: int = 0) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)``.

    Args:
        model: a built-in model, ``"tiny"`` (0.66M-parameter Qwen2, see
            :data:`TINY_HIDDEN_SIZE`) or ``"suite"`` (the suite model of
            :mod:`slca_lightning.models.suite`), randomly initialised from ``seed``; the
            same name with ``-sft`` (``"tiny-sft"``, ``"suite-sft"``): that model after its
            :func:`warm_start`, trained on first use and cached; a named pretrained source
            of :data:`slca_lightning.models.sources.SOURCES` (``"smollm2-135m-instruct"``,
            from its install extra) or a ``.gguf`` file, dequantised once into the cache;
            or the path of a local HF folder with ``config.json``. A ChatML template without
            the tool role gets the hermes one (:mod:`slca_lightning.models.chat`).
        dtype: ``"float32"``, ``"bfloat16"``, ``"float16"`` or ``"auto"`` (the folder's own).
        seed: initialisation seed of a random built-in model (ignored otherwise).

    Raises:
        FileNotFoundError: the folder does not exist or has no ``config.json``.
    """
    if model in BUILTIN_MODELS:
        net, tokenizer = _build_builtin(model, seed)
        torch_dtype = _dtype(dtype)
        return (net if torch_dtype == "auto" else net.to(torch_dtype)), _finish_tokenizer(tokenizer)
    from slca_lightning.models.chat import adapt_chat_template
    from slca_lightning.models.sources import SOURCES, resolve_model_path

    base = model[: -len("-sft")] if model.endswith("-sft") else None
    if base in BUILTIN_MODELS:
        path = warm_start(base=base)
    else:
        path = resolve_model_path(model) or os.path.expanduser(model)
    if not os.path.isdir(path):
        names = [repr(n) for b in BUILTIN_MODELS for n in (b, f"{b}-sft")]
        raise FileNotFoundError(
            f"model folder {path!r} does not exist (expected one of "
            f"{', '.join(names + [repr(n) for n in SOURCES])}, a .gguf file or a local "
            "Hugging Face folder; the hub is never queried)"
        )
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise FileNotFoundError(f"model folder {path!r} has no config.json")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    net = AutoModelForCausalLM.from_pretrained(path, dtype=_dtype(dtype), local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return net, _finish_tokenizer(adapt_chat_template(tokenizer, where=model))


#: Causal-LM classes whose logits are exactly ``lm_head(decoder(...).last_hidden_state)``
#: (no soft-capping or scaling): their log-probs are taken from the hidden states.
PLAIN_HEAD_MODELS = frozenset(
    {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM"}
)


def plain_head(model: Any) -> tuple[Any, Any] | None:
    """``(decoder, lm_head)`` of a model of :data:`PLAIN_HEAD_MODELS` (peft-wrapped too)
    whose head is a plain ``nn.Linear``; None otherwise (other architectures, a head with
    adapters, FSDP-sharded models, whose root forward gathers the head's shards)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if type(base).__name__ not in PLAIN_HEAD_MODELS:
        return None
    config = getattr(base, "config", None)
    if any(getattr(config, k, None) for k in ("final_logit_softcapping", "logit_scale")):
        return None
    try:
        from torch.distributed.fsdp import FSDPModule

        if isinstance(base, FSDPModule):
            return None
    except ImportError:  # pragma: no cover - torch without FSDP2
        pass
    head = base.get_output_embeddings()
    if type(head) is not torch.nn.Linear:
        return None
    return base.get_decoder(), head


def _head_logprobs(
    head: Any,
    hidden: Tensor,
    targets: Tensor,
    temperature: float,
    chunk_size: int,
    return_entropy: bool,
) -> Tensor | tuple[Tensor, Tensor]:
    """:func:`~slca_lightning.logprobs.token_logprobs_from_hidden` of ``lm_head(hidden) / T``."""
    bias = head.bias
    if temperature != 1.0:  # (h / T) W^T + b / T = (h W^T + b) / T
        hidden = hidden / temperature
        bias = None if bias is None else bias / temperature
    return token_logprobs_from_hidden(
        hidden, head.weight, targets, chunk_size, bias, return_entropy
    )


def sequence_logprobs(
    model: Any,
    input_ids: Tensor,
    attention_mask: Tensor,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    return_entropy: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Per-token ``log π(input_ids[t] | input_ids[:t])`` of a causal LM, ``[B, T]`` float32.

    Computed with :func:`~slca_lightning.logprobs.token_logprobs` on
    ``logits[:, :-1] / temperature`` against ``input_ids[:, 1:]`` and shifted right by one,
    so it is aligned with ``input_ids``: position 0 (no context) and padded positions
    (``attention_mask == 0``) hold 0. Differentiable. With ``return_entropy`` also returns
    the entropy ``[B, T]`` of the distribution that scored each token, same alignment.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    keep = attention_mask.bool()
    parts = plain_head(model)
    # Right padding only (every row a prefix of ones): the causal mask already hides the
    # padding from every real token, so the model runs without a padding mask, which lets
    # SDPA take its fused causal kernel (~2x faster on CPU); pad positions are zeroed below.
    right_padded = bool(keep[:, 0].all()) and bool((keep[:, 1:] <= keep[:, :-1]).all())
    mask = None if right_padded else attention_mask
    if parts is not None:  # hidden states through the head a chunk at a time: no [B, T, V]
        decoder, head = parts
        hidden = decoder(input_ids=input_ids, attention_mask=mask).last_hidden_state  # [B, T, H]
        out = _head_logprobs(
            head, hidden[:, :-1], input_ids[:, 1:], temperature, chunk_size, return_entropy
        )
    else:
        logits = model(input_ids=input_ids, attention_mask=mask).logits  # [B, T, V]
        scores = logits[:, :-1]
        if temperature != 1.0:
            scores = scores / temperature
        out = token_logprobs(scores, input_ids[:, 1:], chunk_size, return_entropy)  # [B, T-1]

    def align(x: Tensor) -> Tensor:
        x = torch.nn.functional.pad(x, (1, 0))  # [B, T-1] -> [B, T], position 0 = 0
        return torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))

    if return_entropy:
        return align(out[0]), align(out[1])
    return align(out)


def shared_prefix_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prefix_len: int,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    return_entropy: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """:func:`sequence_logprobs` for rows that share their first tokens.

    The first ``prefix_len`` tokens (equal in every row, e.g. one tool-listing system
    prompt) run once, their KV cache is repeated over the ``B`` rows and the rest runs on
    top of it: the same values and gradients as the plain batch (up to float rounding) for
    a fraction of the cost when the prefix is most of each row (SFT batches of one tool
    prompt, the G rollouts of a GRPO group). Rows must be right-padded.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    batch, width = input_ids.shape
    if not 0 < prefix_len < width:
        raise ValueError(f"prefix_len must be in [1, {width}), got {prefix_len}")
    prefix = input_ids[:1, :prefix_len]  # [1, P]
    parts = plain_head(model)
    net = model if parts is None else parts[0]  # the decoder: hidden states, no [B, T, V]
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    name = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
    out = net(input_ids=prefix, use_cache=True)
    cache = getattr(out, name)  # transformers ≥ 5 names it "cache", older "past_key_values"
    if cache is None:  # no KV cache (gradient checkpointing in training): score plainly
        return sequence_logprobs(
            model, input_ids, attention_mask, temperature, chunk_size, return_entropy
        )
    cache.batch_repeat_interleave(batch)
    rest_out = net(input_ids=input_ids[:, prefix_len:], **{name: cache})
    if parts is None:
        head, rest = out.logits, rest_out.logits  # [1, P, V], [B, T-P, V]
        if temperature != 1.0:
            head, rest = head / temperature, rest / temperature
    else:
        head, rest = out.last_hidden_state, rest_out.last_hidden_state  # [1, P, H], [B, T-P, H]

    def score(scores: Tensor, targets: Tensor) -> tuple[Tensor, Tensor | None]:
        if parts is None:
            got = token_logprobs(scores, targets, chunk_size, return_entropy)
        else:
            got = _head_logprobs(parts[1], scores, targets, temperature, chunk_size, return_entropy)
        return (got[0], got[1]) if return_entropy else (got, None)

    parts = [
        score(head[:, :-1], prefix[:, 1:]),  # [1, P-1], the same for every row
        score(head[:, -1:].expand(batch, -1, -1), input_ids[:, prefix_len : prefix_len + 1]),
        score(rest[:, :-1], input_ids[:, prefix_len + 1 :]),  # [B, T-P-1]
    ]
    keep = attention_mask.bool()

    def join(i: int) -> Tensor:
        pre, bridge, tail = (p[i] for p in parts)
        x = torch.cat([pre.expand(batch, -1), bridge.expand(batch, -1), tail], 1)
        x = torch.nn.functional.pad(x, (1, 0))  # [B, T], position 0 = 0
        return torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))

    return (join(0), join(1)) if return_entropy else join(0)


def grouped_logprobs(
    model: Any,
    input_ids: Tensor,
    attention_mask: Tensor,
    group_ids: Tensor,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    return_entropy: bool = False,
    min_prefix: int = 32,
) -> Tensor | tuple[Tensor, Tensor]:
    """:func:`sequence_logprobs` of a rollout micro-batch, one shared prefix per group.

    The G rollouts of a task share their whole prompt (system prompt with the tool list and
    the user turn), usually most of each row. Rows are split by ``group_ids``; a group whose
    common prefix has at least ``min_prefix`` tokens goes through
    :func:`shared_prefix_logprobs` (its prompt runs once, not G times), any other through
    :func:`sequence_logprobs`. Same values and gradients as one plain batch up to float
    rounding. Rows must be right-padded (as :func:`~slca_lightning.rollout.collate.
    collate_episodes` pads).
    """
    kw = {"temperature": temperature, "chunk_size": chunk_size, "return_entropy": return_entropy}
    width = input_ids.shape[1]
    outs: list[tuple[Tensor, Tensor | None]] = []
    order: list[Tensor] = []
    for gid in torch.unique(group_ids, sorted=True):
        rows = (group_ids == gid).nonzero().flatten()
        ids, am = input_ids[rows], attention_mask[rows]
        length = int(am.sum(1).max())  # drop the padding columns every row of the group has
        ids, am = ids[:, :length], am[:, :length]
        prefix = min(common_prefix_len(ids, am), length - 1)
        if prefix >= min_prefix and len(rows) > 1:
            got = shared_prefix_logprobs(model, ids, am, prefix, **kw)
        else:
            got = sequence_logprobs(model, ids, am, **kw)
        pair = got if return_entropy else (got, None)
        outs.append(tuple(None if x is None else _pad_to(x, width) for x in pair))
        order.append(rows)
    index = torch.argsort(torch.cat(order))
    lp = torch.cat([o[0] for o in outs])[index]
    if not return_entropy:
        return lp
    return lp, torch.cat([o[1] for o in outs])[index]


def _pad_to(x: Tensor, width: int) -> Tensor:
    """Right-pad ``[B, t]`` with zeros to ``[B, width]``."""
    return torch.nn.functional.pad(x, (0, width - x.shape[1]))


def common_prefix_len(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """Length of the token prefix shared by all rows (within every row's real tokens)."""
    same = (input_ids == input_ids[:1]).all(0) & attention_mask.bool().all(0)  # [T]
    return int(same.long().cumprod(0).sum())


# --------------------------------------------------------------------------------------
# Warm start
# --------------------------------------------------------------------------------------


def warm_start(
    cache_dir: str | None = None,
    steps: int | None = None,
    seed: int = 0,
    n_tasks: int | None = None,
    batch_size: int | None = None,
    learning_rate: float | None = None,
    base: str = "tiny",
) -> str:
    """SFT a built-in model on synthetic demonstrations; return the saved folder.

    ``base`` is ``"tiny"`` or ``"suite"``; the other settings default to that model's entry
    of :data:`WARM_STARTS`. The folder is ``<cache_dir>/<base>-sft-<hash of the settings>``
    (``cache_dir`` defaults to :func:`default_cache_dir`). When it already holds a complete
    save it is returned at once; otherwise the model is trained (seeded, deterministic:
    equal settings give equal weights), saved with ``save_pretrained`` (model and
    tokenizer) into a temporary folder next to it, and renamed into place, so an
    interrupted run never leaves a partial cache. A log line (logger
    ``slca_lightning.policy``) says whether it trained or reused the cache, and how long
    that took.

    Both recipes add an auxiliary NLL on prompt and tool tokens (``context_weight=1``):
    for these from-scratch models it more than doubles how often greedy decoding names a
    right tool after the same number of steps. The suite model's demonstrations leave out
    the RL held-out tasks (``skip``), so held-out evaluation never scores a memorised demo.
    """
    import lightning

    from slca_lightning.sft import SFTDataModule, SFTModule

    if base not in WARM_STARTS:
        raise ValueError(f"unknown built-in model {base!r}; choose one of {sorted(WARM_STARTS)}")
    spec = WARM_STARTS[base]
    steps = spec["steps"] if steps is None else steps
    n_tasks = spec["n_tasks"] if n_tasks is None else n_tasks
    batch_size = spec["batch_size"] if batch_size is None else batch_size
    learning_rate = spec["learning_rate"] if learning_rate is None else learning_rate
    recipe, skip = spec["recipe"], spec["skip"]
    key: dict[str, Any] = {
        **{"steps": steps, "seed": seed, "n_tasks": n_tasks, "batch_size": batch_size},
        **{"learning_rate": learning_rate, "recipe": recipe, "version": 3},
    }  # bump "version" when the SFT code changes what it trains
    if base == "tiny":
        key.update(hidden_size=TINY_HIDDEN_SIZE, num_layers=TINY_NUM_LAYERS)
    else:
        from slca_lightning.models import suite

        key.update(
            base=base,
            skip=list(skip) if skip else None,
            hidden_size=suite.SUITE_HIDDEN_SIZE,
            num_layers=suite.SUITE_NUM_LAYERS,
            vocab=[suite.SUITE_VOCAB_SIZE, suite.CORPUS_TASKS, suite.CORPUS_SEED],
            numbers=(
                hashlib.sha256(" ".join(suite.NUMBER_TOKENS).encode()).hexdigest()[:12]
                if suite.WHOLE_NUMBERS
                else None
            ),
        )
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    root = Path(cache_dir or default_cache_dir()).expanduser()
    final = root / f"{base}-sft-{digest}"
    t0 = time.perf_counter()
    if is_complete(final, _DONE_FILE):
        log.info("warm_start: reused cached %s (%.2fs)", final, time.perf_counter() - t0)
        return str(final)
    root.mkdir(parents=True, exist_ok=True)
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    lightning.seed_everything(seed, verbose=False)
    module = SFTModule(model=base, learning_rate=learning_rate, seed=seed, **recipe)
    data = SFTDataModule(n_tasks=n_tasks, seed=seed, batch_size=batch_size, skip=skip)
    from slca_lightning.console import StepProgressBar  # one bar: "SFT warm start: k/steps"

    quiet = {"enable_model_summary": False, "callbacks": [StepProgressBar("SFT warm start")]}
    trainer = lightning.Trainer(
        accelerator="cpu", devices=1, max_steps=steps, logger=False, enable_checkpointing=False,
        deterministic=True, gradient_clip_val=1.0, **quiet,
    )  # fmt: skip
    try:
        trainer.fit(module, datamodule=data)
    finally:  # deterministic=True flips a process-wide flag: put it back
        torch.use_deterministic_algorithms(was_deterministic)
    info = {**key, "seconds": round(time.perf_counter() - t0, 2)}
    save_model_folder(final, module.model, module.tokenizer, _DONE_FILE, info)
    log.info("warm_start: trained %d steps into %s (%.1fs)", steps, final, time.perf_counter() - t0)
    return str(final)


def shard_fsdp2(model: Any, mesh: Any, param_dtype: str | None = None) -> Any:
    """FSDP2: ``fully_shard`` every decoder layer, then the root, over ``mesh``.

    Used by the module's ``configure_model`` under Lightning's ``ModelParallelStrategy``,
    whose 2-D ``device_mesh`` is ``(data_parallel, tensor_parallel)``; the policy uses no
    tensor parallelism, so the mesh's dimensions of size > 1 are used for sharding: one of
    them gives plain FSDP over it, both give HSDP (replicas across the first, shards within the
    second: with Lightning's ``auto`` sizes, replicas across nodes and shards within a node).
    ``param_dtype`` (e.g. ``"bfloat16"``) turns on mixed precision with float32 gradient
    reduction. Works on CPU with gloo.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    names = mesh.mesh_dim_names or ()
    if mesh.ndim > 1 and names:
        big = [n for n in names if mesh[n].size() > 1]
        if len(big) == 1:
            mesh = mesh[big[0]]
        elif not big:
            mesh = mesh[names[0]]
    kw: dict[str, Any] = {"mesh": mesh}
    if param_dtype is not None:
        kw["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=_DTYPES[param_dtype], reduce_dtype=torch.float32
        )
    layers = [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]
    for layer in layers:
        fully_shard(layer, **kw)
    return fully_shard(model, **kw)


@contextmanager
def rollout_weights(model: Any):
    """Keep an FSDP2-sharded ``model`` gathered while it samples rollouts (else a no-op).

    Ranks generate different prompts and so call ``forward`` a different number of times;
    FSDP2 would all-gather at every forward and hang. Gathering once (a collective every rank
    reaches) and keeping the weights unsharded makes generation rank-local.
    """
    from torch.distributed.fsdp import FSDPModule

    units = [] if model is None else [m for m in model.modules() if isinstance(m, FSDPModule)]
    if not units:
        yield
        return
    inner = [u for u in units if u is not model]  # the root never reshards after forward
    for unit in inner:
        unit.set_reshard_after_forward(False, recurse=False)
    for unit in units:
        unit.unshard()
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
        for unit in inner:
            unit.set_reshard_after_forward(True, recurse=False)
