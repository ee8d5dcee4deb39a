"""GradientDiagnostics: gradients of the tool and summary parts of the loss, taken apart.

The paper's appendix compares, per step, the gradient of the policy loss restricted to the
tool segment with the one restricted to the summary segment: their norms (SLCA narrows the
spread of gradient norms) and their cosine (near 0 under GRPO and SLCA alike). This
callback measures both on one micro-batch of the step's rollout batch, and keeps the spread
of each norm over the measurements so far (:func:`norm_spread`).
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Sequence

import torch
from lightning.pytorch.callbacks import Callback

from slca_lightning.config.checks import check_args

__all__ = ["GradientDiagnostics", "gradient_stats", "norm_spread"]


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


def norm_spread(norms: Sequence[float]) -> dict[str, float]:
    """Spread of a series of gradient norms.

    Returns:
        ``n``, ``mean``, ``std`` (sample standard deviation, n − 1 in the denominator; NaN
        for fewer than two values) and ``cv`` = std / mean (NaN when the mean is 0).
    """
    n = len(norms)
    mean = sum(norms) / n if n else math.nan
    std = math.sqrt(sum((x - mean) ** 2 for x in norms) / (n - 1)) if n > 1 else math.nan
    return {"n": float(n), "mean": mean, "std": std, "cv": std / mean if mean > 0 else math.nan}


class GradientDiagnostics(Callback):
    """Every ``every_n_steps`` optimiser steps: ∇ of the tool part and of the summary part.

    On the first ``micro_batch_size`` rows of the step's rollout batch
    (``pl_module.last_rollout``) it takes ``pl_module.loss_parts`` (the policy-gradient loss
    with the advantages zeroed outside one segment; the parts sum to the loss) and computes
    each part's gradient with ``torch.autograd.grad``, so ``.grad`` and the optimiser are
    never touched. It runs after the step's update, i.e. at the new weights. Logs
    ``grad/tool_norm``, ``grad/summary_norm``, ``grad/norm_ratio`` (tool / summary) and
    ``grad/cos_tool_summary``; the last two only when finite (a micro-batch without tool
    tokens has a zero tool gradient). From the second measurement on it also logs the
    running spread of each norm over the measurements so far (:func:`norm_spread`):
    ``grad/tool_norm_std``, ``grad/tool_norm_cv``, ``grad/summary_norm_std``,
    ``grad/summary_norm_cv``. At the end of fit rank zero writes ``<log_dir>/<filename>``:
    one row per measurement, then the spread of both norms.

    Args:
        every_n_steps: measure when ``global_step % every_n_steps == 0``.
        micro_batch_size: rows used (None: the module's ``micro_batch_size``).
        filename: the Markdown table (None: none).

    Attributes:
        history: ``[(step, {name: value})]`` of every measurement.
        table_path: the table written at the end of fit, or None.
    """

    def __init__(
        self,
        every_n_steps: int = 10,
        micro_batch_size: int | None = None,
        filename: str | None = "gradient_diagnostics.md",
    ) -> None:
        check_args(GradientDiagnostics, locals())
        if every_n_steps < 1:
            raise ValueError(f"GradientDiagnostics.every_n_steps must be ≥ 1, got {every_n_steps}")
        self.every_n_steps = every_n_steps
        self.micro_batch_size = micro_batch_size
        self.filename = filename
        self.history: list[tuple[int, dict[str, float]]] = []
        self.table_path: str | None = None
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

    def _warn(self, err: Exception) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"GradientDiagnostics failed ({type(err).__name__}: {err}); skipping "
                "(warned once).",
                RuntimeWarning,
                stacklevel=3,
            )

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = int(trainer.global_step)
        if step == 0 or step % self.every_n_steps:
            return
        try:
            values = self.measure(pl_module)
        except Exception as err:  # a diagnostic must never stop training
            self._warn(err)
            return
        if not values:
            return
        self.history.append((step, values))
        logged = dict(values)
        for part, st in self.spread().items():
            if st["n"] >= 2:
                logged[f"grad/{part}_norm_std"] = st["std"]
                if math.isfinite(st["cv"]):
                    logged[f"grad/{part}_norm_cv"] = st["cv"]
        for logger in trainer.loggers:
            logger.log_metrics(logged, step=step)

    def spread(self) -> dict[str, dict[str, float]]:
        """:func:`norm_spread` of the tool and of the summary gradient norms so far."""
        return {
            part: norm_spread([v[f"grad/{part}_norm"] for _, v in self.history])
            for part in ("tool", "summary")
        }

    def markdown(self) -> str:
        """The measurements, then the spread of both norms, as Markdown tables."""
        keys = ("tool_norm", "summary_norm", "norm_ratio", "cos_tool_summary")
        lines = ["| step | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
        for step, v in self.history:
            cells = (f"{v.get(f'grad/{k}', math.nan):.4g}" for k in keys)
            lines.append(f"| {step} | " + " | ".join(cells) + " |")
        lines += [
            "",
            "| norm | measurements | mean | std | cv (std / mean) |",
            "|---|---|---|---|---|",
        ]
        for part, st in self.spread().items():
            lines.append(
                f"| {part} | {int(st['n'])} | {st['mean']:.4g} | {st['std']:.4g} | {st['cv']:.4g} |"
            )
        return "\n".join(lines)

    def on_train_end(self, trainer, pl_module) -> None:
        if not self.filename or not self.history or not trainer.is_global_zero:
            return
        path = os.path.join(str(trainer.log_dir or trainer.default_root_dir), self.filename)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(
                    f"# Gradient diagnostics (tool vs summary loss parts)\n\n{self.markdown()}\n"
                )
            self.table_path = path
        except OSError as err:
            self._warn(err)

    def state_dict(self) -> dict:
        return {"history": [(s, dict(v)) for s, v in self.history]}

    def load_state_dict(self, state_dict: dict) -> None:
        self.history = [(int(s), dict(v)) for s, v in state_dict.get("history", [])]
