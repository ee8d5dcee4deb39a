"""Rollouts generated ahead of training, with a bound on their staleness (``data.max_staleness``).

:class:`AsyncRolloutStream` wraps the synchronous :class:`~slca_lightning.rollout.datamodule.
RolloutStream` (its task order, seeds, collation and step metrics are the same): a worker
thread with its own copy of the policy generates batch ``i + 1 … i + k`` while the trainer
trains on batch ``i``. When the trainer asks for batch ``i`` (after ``i`` updates), its
current weights are pushed to a staging copy; the worker loads the newest staged weights
before each batch it starts, so every batch comes from weights at most ``k`` updates old
(``rollout/staleness``: the trainer's step minus the version that sampled it; 0 … k).

Each episode keeps the log-probs of the policy that sampled it (``batch.old_logprobs``); the
module recomputes the current policy's log-probs and the truncated importance weight
(``model.tis_cap``, required when ``max_staleness > 0``) corrects for the lag;
``rollout/logprob_mismatch`` logs the gap between the two.

Torch's intra-op thread pool is process-wide: with ``threads: 1`` each of the two threads
runs its operations on its own core (generation on one, the update on the other). Batches
are counted served only when training takes them, so a killed run resumes at the first
batch not yet trained: nothing trained is repeated and nothing is lost (batches generated
ahead are discarded and generated again, by then with newer weights).
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

import torch

from slca_lightning.rollout.agent_loop import AgentLoop
from slca_lightning.types import RolloutBatch

__all__ = ["AsyncRolloutStream"]


class AsyncRolloutStream:
    """Endless rollout batches generated up to ``max_staleness`` steps ahead (see module
    docstring).

    Args:
        stream: the synchronous stream (task order, seeds, collation, metrics).
        max_staleness: how many updates older than the trainer's a batch's weights may be.
        policy: the trainer's policy (its weights are copied to the worker's model).
        steps_per_batch: optimiser steps the trainer takes per rollout batch.
    """

    def __init__(self, stream: Any, max_staleness: int, policy: torch.nn.Module, steps_per_batch=1):
        self.stream, self.k = stream, int(max_staleness)
        self.policy, self.steps_per_batch = policy, max(int(steps_per_batch), 1)
        self.model = copy.deepcopy(policy).eval()  # the worker's weights
        self.model.requires_grad_(False)
        self.staged = {k: v.detach().clone() for k, v in policy.state_dict().items()}
        self.staged_version = self.loaded_version = -1
        loop: AgentLoop = stream.loop
        engine = copy.copy(loop.engine)
        engine.bind(self.model, loop.tokenizer)
        self.loop = stream.dm.make_loop(engine)
        self.lock = threading.Lock()  # guards the staged weights
        self.ready = threading.Condition()  # guards requests and results
        self.requested: list[int] = []
        self.results: dict[int, RolloutBatch | BaseException] = {}
        self.next_request = None  # the first index not yet requested
        self.stopped = False
        self.thread: threading.Thread | None = None

    def __iter__(self):
        return self

    # -- the trainer's side -----------------------------------------------------------------
    def __next__(self) -> RolloutBatch:
        index = self.stream.dm.batches_served
        trainer = self.stream.dm._trainer_or_none()
        version = int(trainer.global_step) if trainer is not None else 0
        self.push(self.policy, version)
        if self.next_request is None or self.next_request <= index:
            self.next_request = index  # a fresh stream, or a resumed run
        last = index + self.k
        max_steps = getattr(trainer, "max_steps", -1) if trainer is not None else -1
        if max_steps and max_steps > 0:  # never generate batches training will not take
            last = min(last, -(-max_steps // self.steps_per_batch) - 1)
        with self.ready:
            while self.next_request <= last:
                self.requested.append(self.next_request)
                self.next_request += 1
            self.ready.notify_all()
        self._start()
        t0 = time.perf_counter()
        with self.ready:
            while index not in self.results:
                self.ready.wait()
            result = self.results.pop(index)
        if isinstance(result, BaseException):
            raise result
        result.stats["time/rollout_wait"] = time.perf_counter() - t0
        result.stats["rollout/staleness"] = float(version - result.stats["rollout/policy_version"])
        self.stream.finish(result, index)
        return result

    def push(self, policy: torch.nn.Module, version: int) -> None:
        """Stage ``policy``'s weights as ``version`` (the worker loads them before its next
        batch)."""
        with self.lock, torch.no_grad():
            for name, value in policy.state_dict().items():
                self.staged[name].copy_(value)
            self.staged_version = version

    def close(self) -> None:
        """Stop the worker after the batch it is generating (pending requests dropped)."""
        with self.ready:
            self.stopped = True
            self.requested.clear()
            self.ready.notify_all()
        if self.thread is not None:
            self.thread.join()
            self.thread = None

    # -- the worker's side ------------------------------------------------------------------
    def _start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._work, name="slca-rollouts", daemon=True)
            self.thread.start()

    def _load(self) -> int:
        with self.lock, torch.no_grad():
            if self.staged_version != self.loaded_version:
                self.model.load_state_dict(self.staged)
                self.loaded_version = self.staged_version
            return self.loaded_version

    def _work(self) -> None:
        while True:
            with self.ready:
                while not self.requested and not self.stopped:
                    self.ready.wait()
                if self.stopped:
                    return
                index = self.requested.pop(0)
            try:
                version = self._load()
                with torch.no_grad():
                    batch: RolloutBatch | BaseException = self.stream.make_batch(
                        index, self.loop, version
                    )
            except BaseException as err:  # handed to the trainer, raised there
                batch = err
            with self.ready:
                self.results[index] = batch
                self.ready.notify_all()
