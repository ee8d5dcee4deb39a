"""Bad input to VLLMEngine, in every environment: vLLM missing, bad settings, out of memory.

Without vLLM the package still imports, and the engine says how to install it.

Runs in every environment: ``sys.modules["vllm"] = None`` makes ``import vllm`` fail even
where it is installed.
"""

import sys
import types

import pytest
import torch

from slca_lightning.rollout.vllm_engine import VLLMEngine


def test_missing_vllm_names_the_extra_and_the_install_script(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    engine = VLLMEngine(model_path="/nonexistent")
    with pytest.raises(ImportError, match=r"slca_lightning\[vllm\].*install_vllm_cpu\.sh"):
        engine.start()


def test_bad_settings_name_the_field():
    with pytest.raises(ValueError, match="sync"):
        VLLMEngine(sync="bogus")
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        VLLMEngine(gpu_memory_utilization=1.5)


# vLLM 0.32's own start-up failures, verbatim (vllm/v1/core/kv_cache_utils.py,
# vllm/v1/worker/utils.py, vllm/v1/engine/utils.py).
KV_CACHE_TOO_SMALL = ValueError(
    "To serve at least one request with the model's max seq len (32768), (1.5 GiB KV cache "
    "is needed, which is larger than the available KV cache memory (0.9 GiB). Based on the "
    "available memory, the estimated maximum model length is 19000. Try increasing "
    "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or "
    "decreasing `max_model_len` when initializing the engine."
)
NO_CACHE_BLOCKS = ValueError(
    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
    "initializing the engine"
)
FREE_MEMORY = ValueError(
    "Free memory on device cuda:0 (20.1/79.3 GiB) on startup is less than desired GPU memory "
    "utilization (0.9, 71.4 GiB). Decrease GPU memory utilization or reduce GPU memory used "
    "by other processes."
)
CORE_FAILED = RuntimeError(
    "Engine core initialization failed. See root cause above. Failed core proc(s): {}"
)
WEIGHTS_OOM = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


@pytest.mark.parametrize(
    "exc", [KV_CACHE_TOO_SMALL, NO_CACHE_BLOCKS, FREE_MEMORY, CORE_FAILED, WEIGHTS_OOM]
)
def test_out_of_memory_at_engine_start_names_the_settings(monkeypatch, tmp_path, exc):
    """Boundary: a stand-in ``vllm`` module whose ``LLM`` raises what vLLM raises when the
    weights or the KV cache do not fit (a real out-of-memory needs a GPU; the real KV-cache
    failure on CPU is tests/vllm/test_vllm_engine.py::test_real_kv_cache_overflow...)."""
    seen = {}

    class LLM:
        def __init__(self, **kwargs):
            seen.update(kwargs)
            raise exc

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM))
    engine = VLLMEngine(model_path=str(tmp_path), gpu_memory_utilization=0.6, max_model_len=8192)
    with pytest.raises(RuntimeError) as info:
        engine.start()
    text = str(info.value)
    for setting in ("gpu_memory_utilization (now 0.6)", "max_model_len (now 8192)"):
        assert setting in text
    assert "tensor_parallel_size" in text and "VLLM_CPU_KVCACHE_SPACE" in text
    assert str(exc) in text and info.value.__cause__ is exc
    assert seen["model"] == str(tmp_path) and engine.llm is None


def test_other_start_errors_pass_through_unchanged(monkeypatch, tmp_path):
    """Boundary as above: an error that is not about memory is not re-worded."""
    bad = ValueError("Model architectures ['Nope'] are not supported for now.")

    class LLM:
        def __init__(self, **kwargs):
            raise bad

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM))
    with pytest.raises(ValueError) as info:
        VLLMEngine(model_path=str(tmp_path)).start()
    assert info.value is bad
