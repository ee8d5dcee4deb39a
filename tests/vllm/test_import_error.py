"""Without vLLM the package still imports, and the engine says how to install it.

Runs in every environment: ``sys.modules["vllm"] = None`` makes ``import vllm`` fail even
where it is installed.
"""

import pytest

from slca_lightning.rollout.vllm_engine import VLLMEngine


def test_missing_vllm_names_the_extra_and_the_install_script(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "vllm", None)
    engine = VLLMEngine(model_path="/nonexistent")
    with pytest.raises(ImportError, match=r"slca_lightning\[vllm\].*install_vllm_cpu\.sh"):
        engine.start()


def test_bad_settings_name_the_field():
    with pytest.raises(ValueError, match="sync"):
        VLLMEngine(sync="bogus")
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        VLLMEngine(gpu_memory_utilization=1.5)
