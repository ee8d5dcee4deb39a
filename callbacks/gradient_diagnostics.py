"""GradientDiagnostics: gradients of the tool and summary parts of the loss, taken apart.

The paper's appendix compares, per step, the gradient of the policy loss restricted to the
tool segment with the one restricted to the summary segment: their norms (SLCA narrows the
spread of gradient norms) and their cosine (near 0 under GRPO and SLCA alike). This
callback measures both on one micro-batch of the step's rollout batch.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import torch
from lightning.pytorch.callbacks import Callback

__all__ = ["GradientDiagnostics", "gradient_stats"]


def gradient_stats(
    grads_a: Sequence[torch.Tensor | None], grads_b: Sequence[torch.Tensor | None]
) -> dict[str, float]:
    """Norms and cosine of two gradients given per parameter (None = a zero gradient).

    Returns:
        ``norm_a``, ``norm_b`` (L2 of the flattened gradients), ``ratio`` = norm_a / norm_b
        and ``cos`` = ⟨a, b⟩ / (‖a‖·‖b‖); ratio and cos are NaN when a norm they divide by
        is 0.
    """
    if len(grads_a) != len(grads_b):
        raise ValueError(f"{len(grads_a)} vs {len(grads_b)} gradient tensors")
    dot = sq_a = sq_b = torch.zeros((), dtype=torch.float64)
    for a, b in zip(grads_a, grads_b, strict=True):
        a64 = None if a is None else a.detach().double().flatten().cpu()
        b64 = None if b is None else b.detach().double().flatten().cpu()
        if a64 is not None:
            sq_a = sq_a + a64 @ a64
        if b64 is not None:
            sq_b = sq_b + b64 @ b64
        if a64 is not None and b64 is not None:
            dot = dot + a64 @ b64
    norm_a, norm_b = math.sqrt(float(sq_a)), math.sqrt(float(sq_b))
    return {
        "norm_a": norm_a,
        "norm_b": norm_b,
        "ratio": norm_a / norm_b if norm_b > 0 else math.nan,
        "cos": float(dot) / (norm_a * norm_b) if norm_a > 0 and norm_b > 0 else math.nan,
    }


class GradientDiagnostics(Callback):
    """Every ``every_n_steps`` optimiser steps: ∇ of the tool part and of the summary part.

    On the first ``micro_batch_size`` rows of the step's rollout batch
    (``pl_module.last_rollout``) it takes ``pl_module.loss_parts`` (the policy-gradient loss
    with the advantages zeroed outside one segment; the parts sum to the loss) and computes
    each part's gradient with ``torch.autograd.grad``, so ``.grad`` and the optimiser are
    never touched. It runs after the step's update, i.e. at the new weights. Logs
    ``grad/tool_norm``, ``grad/summary_norm``, ``grad/norm_ratio`` (tool / summary) and
    ``grad/cos_tool_summary``; the last two only when finite (a micro-batch without tool
    tokens has a zero tool gradient).

    Args:
        every_n_steps: measure when ``global_step % every_n_steps == 0``.
        micro_batch_size: rows used (None: the module's ``micro_batch_size``).

    Attributes:
        history: ``[(step, {name: value})]`` of every measurement.
    """

    def __init__(self, every_n_steps: int = 10, micro_batch_size: int | None = None) -> None:
        if every_n_steps < 1:
            raise ValueError(f"GradientDiagnostics.every_n_steps must be ≥ 1, got {every_n_steps}")
        self.every_n_steps = every_n_steps
        self.micro_batch_size = micro_batch_size
        self.history: list[tuple[int, dict[str, float]]] = []
        self._warned = False

    def measure(self, pl_module) -> dict[str, float]:
        """The four figures on the current ``last_rollout`` (empty when there is none)."""
        record = getattr(pl_module, "last_rollout", None)
        if record is None or not {"tool", "summary"} <= set(record.segments.masks):
            return {}
        mbs = self.micro_batch_size or int(pl_module.hparams.micro_batch_size)
        rows = torch.arange(min(mbs, record.batch.batch_size))
        params = [p for p in pl_module.policy.parameters() if p.requires_grad]
        with torch.enable_grad():
            parts = pl_module.loss_parts(record, rows)
            g_tool = torch.autograd.grad(
                parts["tool"], params, retain_graph=True, allow_unused=True
            )
            g_sum = torch.autograd.grad(parts["summary"], params, allow_unused=True)
        st = gradient_stats(g_tool, g_sum)
        out = {"grad/tool_norm": st["norm_a"], "grad/summary_norm": st["norm_b"]}
        if math.isfinite(st["ratio"]):
            out["grad/norm_ratio"] = st["ratio"]
        if math.isfinite(st["cos"]):
            out["grad/cos_tool_summary"] = st["cos"]
        return out

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = int(trainer.global_step)
        if step == 0 or step % self.every_n_steps:
            return
        try:
            values = self.measure(pl_module)
        except Exception as err:  # a diagnostic must never stop training
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"GradientDiagnostics failed ({type(err).__name__}: {err}); skipping "
                    "(warned once).",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return
        if not values:
            return
        self.history.append((step, values))
        for logger in trainer.loggers:
            logger.log_metrics(values, step=step)
