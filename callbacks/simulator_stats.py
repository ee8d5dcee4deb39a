"""SimulatorStats: the tool simulator's counters and latency percentiles, logged every step.

Each train batch it reads ``trainer.datamodule.simulator.stats_snapshot()`` (a
:class:`~slca_lightning.tools.simulator.SchemaGuidedSimulator`; a simulator with only ``stats``
works too) and logs, under ``sim/``:

- the per-step delta of every counter: ``sim/calls``, ``sim/cache_hits``,
  ``sim/backend_calls``, ``sim/retries``, the validation errors by kind
  (``sim/unknown_tool``, ``sim/missing_arguments``, ``sim/schema_invalid``,
  ``sim/output_invalid``), real faults (``sim/backend_errors``, ``sim/timeouts``), injected
  ones (``sim/injected_faults`` and a ``FaultInjector``'s ``sim/injected_timeouts``,
  ``sim/injected_server_errors``, ``sim/injected_malformed``), a ``ReplayBackend``'s
  ``sim/replay_hits`` / ``sim/replay_misses`` and the cache's ``sim/cache_*``;
- ``sim/cache_hit_rate`` (cache hits / calls in the step);
- ``sim/latency_p50``, ``sim/latency_p90``, ``sim/latency_p99`` (seconds, over the calls
  of the step; left out when the step made no call);
- with ``cumulative=True``, the running totals as ``sim/total/<counter>``.

The module does not log simulator counters itself (it logs ``rollout/tool_errors_per_episode``
from the agent loop); this callback is the one place they come from. Add it to
``trainer.callbacks`` (``configs/components/simulator.yaml`` has the entry).
"""

from __future__ import annotations

import lightning as L

from slca_lightning.tools.simulator import percentile

__all__ = ["SimulatorStats"]


class SimulatorStats(L.Callback):
    """Logs the simulator's per-step counter deltas and latency percentiles under ``prefix``.

    Args:
        prefix: metric prefix (default ``sim``).
        cumulative: also log the running totals under ``<prefix>/total/``.
    """

    def __init__(self, prefix: str = "sim", cumulative: bool = False) -> None:
        self.prefix = prefix
        self.cumulative = cumulative
        self._last: dict[str, float] = {}
        self._seq = 0
        self.last_metrics: dict[str, float] = {}

    @staticmethod
    def _simulator(trainer):
        dm = getattr(trainer, "datamodule", None)
        return getattr(dm, "simulator", None)

    def read(self, simulator) -> dict[str, float]:
        """The metrics since the previous read (updates the remembered totals)."""
        if simulator is None:
            return {}
        if hasattr(simulator, "stats_snapshot"):
            totals = simulator.stats_snapshot()
        else:
            totals = dict(getattr(simulator, "stats", {}) or {})
        p = self.prefix
        out: dict[str, float] = {}
        for key, value in totals.items():
            out[f"{p}/{key}"] = float(value) - float(self._last.get(key, 0.0))
            if self.cumulative:
                out[f"{p}/total/{key}"] = float(value)
        self._last = {k: float(v) for k, v in totals.items()}
        calls = out.get(f"{p}/calls", 0.0)
        if calls > 0:
            out[f"{p}/cache_hit_rate"] = out.get(f"{p}/cache_hits", 0.0) / calls
        if hasattr(simulator, "latencies_since"):
            latencies, self._seq = simulator.latencies_since(self._seq)
            if latencies:
                for q in (50, 90, 99):
                    out[f"{p}/latency_p{q}"] = percentile(latencies, q)
        return out

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        metrics = self.read(self._simulator(trainer))
        self.last_metrics = metrics
        if metrics and trainer.logger is not None:
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)
