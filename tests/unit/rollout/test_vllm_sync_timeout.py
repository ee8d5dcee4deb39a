"""A weight sync that hangs fails with WeightSyncTimeout instead of hanging (PITFALLS §5).

Runs in the main environment, without vLLM: the real ``VLLMEngine.sync_weights`` (bucketing,
packing, the timeout) on a real ``nn.Linear``, against :class:`HangingLLM`, a boundary mock
of the running ``vllm.LLM``.
"""

from __future__ import annotations

import threading
import time

import pytest
from torch import nn

from slca_lightning.rollout.vllm_engine import VLLMEngine, WeightSyncTimeout


class HangingLLM:
    """Boundary mock of ``vllm.LLM``: only the two calls a sync makes. ``collective_rpc``
    blocks (a hung collective or a stuck worker) until the test releases it or 60 s pass,
    so the worker thread the engine leaves behind ends with the test."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.rpc_calls: list[str] = []
        self.cache_resets = 0

    def collective_rpc(self, method: str, args: tuple = ()) -> list:
        self.rpc_calls.append(method)
        self.release.wait(timeout=60.0)
        return [0]

    def reset_prefix_cache(self) -> None:
        self.cache_resets += 1


@pytest.mark.timeout(30)
def test_a_hung_sync_raises_a_clear_timeout_error():
    engine = VLLMEngine(sync="full", sync_timeout_s=0.3)
    engine.llm = llm = HangingLLM()  # started: sync_weights does not start vLLM again
    engine.policy_version = 3
    t0 = time.perf_counter()
    try:
        with pytest.raises(WeightSyncTimeout) as info:
            engine.sync_weights(nn.Linear(4, 4))
        elapsed = time.perf_counter() - t0
    finally:
        llm.release.set()
    message = str(info.value)
    assert "sync_timeout_s=0.3s" in message and "policy version 3" in message
    assert "data.engine.init_args.sync_timeout_s" in message and "sync_bucket_mb" in message
    assert "every rank" in message  # the likely cause is named
    assert 0.3 <= elapsed < 5.0  # waited for the timeout, not for the hung call
    assert llm.rpc_calls == ["slca_load_weights"]  # it hung in the first bucket
    assert llm.cache_resets == 0 and engine.synced_version == 0  # nothing claims success
    assert isinstance(info.value, RuntimeError)


@pytest.mark.timeout(30)
def test_a_sync_within_the_timeout_succeeds():
    engine = VLLMEngine(sync="full", sync_timeout_s=10.0)
    engine.llm = llm = HangingLLM()
    llm.release.set()  # the workers answer at once
    engine.policy_version = 1
    engine.sync_weights(nn.Linear(4, 4))
    assert llm.rpc_calls == ["slca_load_weights", "slca_commit_weights"]
    assert llm.cache_resets == 1 and engine.synced_version == 1
    assert engine.last_sync_s > 0 and engine.last_sync_mb > 0
