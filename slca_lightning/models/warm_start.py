"""The built-in models' SFT warm starts (``"tiny-sft"``, ``"suite-sft"``, ``"suite-pooled-sft"``).

A warm start is SFT (:mod:`slca_lightning.models.sft`) of a built-in model on demonstrations
of the synthetic suite, by the recipe of its :data:`WARM_STARTS` entry. The suite model's two
warm starts ship inside the package (:mod:`slca_lightning.models.shipped`): they are trained
once by ``slca warm-start build NAME`` and loaded in a second. Any other warm start (the tiny
model's, or a built-in one with other settings) is trained on first use by
:func:`warm_start` and cached on disk, keyed by its settings.

How the suite recipe picks its step (an SFT-only rule, fixed before any RL run): the learning
rate decays over ``steps`` (the horizon); every ``selection["every"]`` steps the NLL of the
assistant tokens of demonstrations of ``selection["validation"]`` tasks (indices no
demonstration, RL split or evaluation uses) is measured, and the weights of the lowest
validation NLL are the warm start. The schedule depends on the horizon only, so the weights
at step k are those of any run of the recipe stopped at k.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from slca_lightning.models.cached_folders import default_cache_dir, is_complete, save_model_folder
from slca_lightning.models.loading import TINY_HIDDEN_SIZE, TINY_NUM_LAYERS

__all__ = [
    "WARM_STARTS",
    "WarmStartRun",
    "learning_rate_at",
    "selected_step",
    "train_warm_start",
    "validation_batches",
    "validation_nll",
    "warm_start",
    "warm_start_key",
]

log = logging.getLogger(
    "slca_lightning.models.policy"
)  # the logger name the warm start always used

#: Warm-start defaults of the tiny model (measured on 2 CPU cores).
WARM_START_STEPS = 300
WARM_START_TASKS = 480
WARM_START_BATCH_SIZE = 8
WARM_START_LR = 5e-3
#: Recipe fixed by the warm start (part of the cache key): weight of the auxiliary
#: NLL on prompt/tool tokens, linear decay to 10% of the learning rate, warmup steps.
WARM_START_RECIPE = {"context_weight": 1.0, "final_lr_fraction": 0.1, "warmup_steps": 10}

#: Per built-in model: SFT steps (for the suite model: the horizon the learning rate decays
#: over, the selected step is at most this), demonstrations, batch size, learning rate, the
#: fixed recipe, the task indices left out of the demonstrations (``skip``: the RL held-out
#: split ``[256, 512)`` of ``SyntheticTasks(seed=0, n_train=256)``, any ``n_heldout`` ≤ 256)
#: and, for the suite model, the step selection (validation tasks ``[1280, 1344)``, which
#: no demonstration, RL split or evaluation uses). Why batch 32 and this horizon: copying
#: argument values arrives as a phase transition after 1,000–3,000 steps, earlier at a
#: larger batch (``experiments/warm_start/README.md``).
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
        "steps": 3000,
        "n_tasks": 1024,
        "batch_size": 32,
        "learning_rate": 2e-3,
        "recipe": {"context_weight": 1.0, "final_lr_fraction": 0.1, "warmup_steps": 20},
        "skip": (256, 512),
        "selection": {"every": 250, "validation": (1280, 1344)},
    },
}
#: The suite model trained on pooled demonstrations: the same tasks and recipe as
#: ``"suite"``, but half of the demonstrations (drawn per task, seeded) write their calls'
#: arguments as a JSON string, as OpenAI-format logs store them; the agent loop rejects
#: such calls (METHOD §4.1 requires an object). Imitation learns both sources; the reward
#: tells them apart (``experiments/learning/README.md``). Its step is the clean warm
#: start's (``step_of``: the same recipe and budget): which format a demonstration uses is a
#: coin flip per task that no validation NLL can predict, so the pooled data's own
#: validation NLL rises once the model memorises each training task's coin (from step ~500,
#: ``experiments/warm_start/README.md``) and would stop it before it copies values. Its
#: validation curve (demonstrations pooled the same way) is recorded, never used to pick.
WARM_STARTS["suite-pooled"] = {
    **WARM_STARTS["suite"],
    "model": "suite",
    "string_arguments_fraction": 0.5,
    "selection": {**WARM_STARTS["suite"]["selection"], "step_of": "suite-sft"},
}

_DONE_FILE = "slca_warm_start.json"


def warm_start_key(
    base: str,
    steps: int | None = None,
    seed: int = 0,
    n_tasks: int | None = None,
    batch_size: int | None = None,
    learning_rate: float | None = None,
) -> dict[str, Any]:
    """The settings of a warm start (``base``'s :data:`WARM_STARTS` entry with these
    overrides), hashed into its cache folder's name by :func:`warm_start`."""
    if base not in WARM_STARTS:
        raise ValueError(f"unknown built-in model {base!r}; choose one of {sorted(WARM_STARTS)}")
    spec = WARM_STARTS[base]
    arch, pooled = spec.get("model", base), spec.get("string_arguments_fraction", 0.0)
    key: dict[str, Any] = {
        "steps": spec["steps"] if steps is None else steps,
        "seed": seed,
        "n_tasks": spec["n_tasks"] if n_tasks is None else n_tasks,
        "batch_size": spec["batch_size"] if batch_size is None else batch_size,
        "learning_rate": spec["learning_rate"] if learning_rate is None else learning_rate,
        "recipe": spec["recipe"],
        "version": 3,  # bump when the SFT code changes what it trains
    }
    if pooled:  # only then: the clean warm starts keep their cache folders
        key["string_arguments_fraction"] = pooled
    if spec.get("selection"):
        key["selection"] = {
            **spec["selection"],
            "validation": list(spec["selection"]["validation"]),
        }
        if "step_of" in spec["selection"]:  # the step another warm start's rule chose
            key["selection"]["step"] = selected_step(spec["selection"]["step_of"])
    if arch == "tiny":
        key.update(hidden_size=TINY_HIDDEN_SIZE, num_layers=TINY_NUM_LAYERS)
        return key
    from slca_lightning.models import suite

    skip = spec["skip"]
    key.update(
        base=arch,
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
    return key


def validation_batches(
    tokenizer: Any,
    lo: int,
    hi: int,
    seed: int = 0,
    string_arguments_fraction: float = 0.0,
    batch_size: int = 16,
) -> list[dict[str, torch.Tensor]]:
    """Padded SFT batches of the demonstrations of synthetic tasks ``[lo, hi)`` of
    ``seed``, a ``string_arguments_fraction`` of them pooled as in training (drawn per task
    by their own seeded generator)."""
    from slca_lightning.data import SyntheticTaskGenerator, builtin_suite, reference_answer
    from slca_lightning.models.sft import SFTDataModule, build_sft_example

    suite = builtin_suite()
    tasks = SyntheticTaskGenerator(seed, suite=suite).generate(hi)[lo:hi]
    pooled = random.Random(f"validation-string-arguments-{seed}")
    rows = [
        build_sft_example(
            tokenizer,
            t.messages
            + reference_answer(
                t, suite, string_arguments=pooled.random() < string_arguments_fraction
            ),
        )
        for t in tasks
    ]
    dm = SFTDataModule(tokenizer)
    return [dm.collate(rows[i : i + batch_size]) for i in range(0, len(rows), batch_size)]


def validation_nll(module: Any, batches: list[dict[str, torch.Tensor]]) -> float:
    """Token-weighted mean NLL of the assistant tokens of ``batches`` under ``module`` (an
    :class:`~slca_lightning.models.sft.SFTModule`), in eval mode, no gradients."""
    was = module.training
    module.eval()
    with torch.no_grad():
        parts = [module.loss({k: v.to(module.device) for k, v in b.items()}) for b in batches]
    module.train(was)
    n = sum(float(p["tokens"]) for p in parts)
    return sum(float(p["nll"]) * float(p["tokens"]) for p in parts) / n


@dataclass
class WarmStartRun:
    """What :func:`train_warm_start` trained: the selected weights and how they were found.

    ``losses`` is the training NLL of every step, ``curve`` one dict per selection point
    (``step``, ``validation_nll``, ``seconds`` and whatever the probe returned), ``step``
    the selected step (the last one without selection)."""

    model: Any
    tokenizer: Any
    key: dict[str, Any]
    step: int
    losses: list[float] = field(default_factory=list)
    curve: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


def train_warm_start(
    base: str,
    steps: int | None = None,
    seed: int = 0,
    n_tasks: int | None = None,
    batch_size: int | None = None,
    learning_rate: float | None = None,
    max_steps: int | None = None,
    probe: Callable[[Any, Any], dict[str, Any]] | None = None,
    callbacks: Sequence[Any] = (),
) -> WarmStartRun:
    """Train the warm start ``base`` by its :data:`WARM_STARTS` recipe (seeded,
    deterministic) and return the selected weights.

    With a ``selection`` entry the validation NLL is measured every ``every`` steps and the
    lowest one's weights are kept, or, with ``step_of``, the weights at the step that warm
    start's rule chose (its shipped manifest's; the curve is recorded all the same);
    ``probe(model, tokenizer)`` (optional) adds its own figures to each selection point (for
    the record only: it never picks). ``max_steps`` stops early without changing the
    schedule (tests check the recipe's first steps).
    ``callbacks`` are added to the trainer (a progress bar turns Lightning's bar on).
    """
    import lightning

    from slca_lightning.models.sft import SFTDataModule, SFTModule

    key = warm_start_key(base, steps, seed, n_tasks, batch_size, learning_rate)
    spec = WARM_STARTS[base]
    horizon, recipe = key["steps"], spec["recipe"]
    arch, skip = spec.get("model", base), spec["skip"]
    pooled = spec.get("string_arguments_fraction", 0.0)
    selection = spec.get("selection")
    fixed = key.get("selection", {}).get("step")  # the step another warm start's rule chose
    if fixed is not None:
        max_steps = min(max_steps or fixed, fixed)
    t0 = time.perf_counter()
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    lightning.seed_everything(seed, verbose=False)
    module = SFTModule(
        model=arch, learning_rate=key["learning_rate"], seed=seed, decay_steps=horizon, **recipe
    )
    data = SFTDataModule(
        n_tasks=key["n_tasks"], seed=seed, batch_size=key["batch_size"], skip=skip,
        string_arguments_fraction=pooled,
    )  # fmt: skip
    run = WarmStartRun(None, None, key, 0)
    best: dict[str, Any] = {"nll": float("inf"), "state": None, "step": 0}

    class _Record(lightning.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            loss = trainer.callback_metrics.get("sft/loss")
            run.losses.append(float(loss) if loss is not None else float("nan"))
            step = trainer.global_step
            if selection is None or (step % selection["every"] and step != trainer.max_steps):
                return
            if not hasattr(self, "batches"):
                lo, hi = selection["validation"]
                self.batches = validation_batches(pl_module.tokenizer, lo, hi, seed, pooled)
            nll = validation_nll(pl_module, self.batches)
            point = {"step": step, "validation_nll": round(nll, 4)}
            if probe is not None:
                was = pl_module.model.training
                pl_module.model.eval()
                with torch.no_grad():
                    point.update(probe(pl_module.model, pl_module.tokenizer))
                pl_module.model.train(was)
            point["seconds"] = round(time.perf_counter() - t0, 1)
            run.curve.append(point)
            log.info("warm_start %s: %s", base, json.dumps(point))
            if fixed is None and nll < best["nll"]:
                best.update(nll=nll, step=step, state=copy.deepcopy(pl_module.model.state_dict()))

    from lightning.pytorch.callbacks import ProgressBar

    progress = any(isinstance(c, ProgressBar) for c in callbacks)
    log.info("warm_start %s: training %d steps (%s)", base, horizon, json.dumps(key))
    trainer = lightning.Trainer(
        accelerator="cpu", devices=1, max_steps=min(horizon, max_steps or horizon),
        logger=False, enable_checkpointing=False, deterministic=True, gradient_clip_val=1.0,
        enable_model_summary=False, enable_progress_bar=progress, callbacks=[_Record(), *callbacks],
    )  # fmt: skip
    try:
        trainer.fit(module, datamodule=data)
    finally:  # deterministic=True flips a process-wide flag: put it back
        torch.use_deterministic_algorithms(was_deterministic)
    run.step = int(trainer.global_step)
    if best["state"] is not None:
        module.model.load_state_dict(best["state"])
        run.step = best["step"]
    run.model, run.tokenizer = module.model.eval(), module.tokenizer
    run.seconds = round(time.perf_counter() - t0, 1)
    return run


def learning_rate_at(base: str, step: int) -> float:
    """The learning rate :func:`train_warm_start`'s schedule gives ``base``'s recipe after
    ``step`` steps (linear warm-up, then linear decay to ``final_lr_fraction`` at ``steps``)."""
    spec = WARM_STARTS[base]
    recipe, total = spec["recipe"], spec["steps"]
    warm, final = recipe["warmup_steps"], recipe["final_lr_fraction"]
    ramp = min(1.0, (step + 1) / (warm + 1))
    return spec["learning_rate"] * min(ramp, final + (1 - final) * max(0.0, 1 - step / total))


def selected_step(name: str) -> int:
    """The step a built-in warm start (``"suite-sft"``, ...) was selected at: its shipped
    manifest's (a warm start whose step is another's, ``step_of``, needs that one shipped).

    Raises:
        ValueError: it ships no manifest (build it first: ``slca warm-start NAME``).
    """
    from slca_lightning.models import shipped

    info = shipped.manifest(name)
    if info is None:
        raise ValueError(
            f"warm start {name!r} ships no manifest in {shipped.WEIGHTS_DIR}: its step is "
            f"unknown; build it first with: slca warm-start {name}"
        )
    return int(info["step"])


def warm_start(
    cache_dir: str | None = None,
    steps: int | None = None,
    seed: int = 0,
    n_tasks: int | None = None,
    batch_size: int | None = None,
    learning_rate: float | None = None,
    base: str = "tiny",
) -> str:
    """The folder of the warm start ``base`` (``"tiny"``, ``"suite"`` or ``"suite-pooled"``).

    With every setting at its default and the weights shipped in the package
    (:mod:`slca_lightning.models.shipped`), the shipped weights are checked against their
    sha256 and written once into the cache as an HF folder: nothing trains. Otherwise the
    warm start is trained by :func:`train_warm_start` and cached in
    ``<cache_dir>/<base>-sft-<hash of warm_start_key(...)>`` (``cache_dir`` defaults to
    :func:`default_cache_dir`); a complete save there is returned at once. Saves are atomic
    (a temporary folder renamed into place), so an interrupted run never leaves a partial
    cache. A log line (logger ``slca_lightning.models.policy``) says what was loaded or trained.
    """
    from slca_lightning.models import shipped

    defaults = (steps, n_tasks, batch_size, learning_rate) == (None,) * 4 and seed == 0
    if defaults and shipped.is_shipped(f"{base}-sft"):
        return shipped.shipped_folder(f"{base}-sft", cache_dir)
    key = warm_start_key(base, steps, seed, n_tasks, batch_size, learning_rate)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    root = Path(cache_dir or default_cache_dir()).expanduser()
    final = root / f"{base}-sft-{digest}"
    t0 = time.perf_counter()
    if is_complete(final, _DONE_FILE):
        log.info("warm_start: reused cached %s (%.2fs)", final, time.perf_counter() - t0)
        return str(final)
    root.mkdir(parents=True, exist_ok=True)
    run = train_warm_start(base, steps, seed, n_tasks, batch_size, learning_rate)
    info = {**key, "selected_step": run.step, "seconds": run.seconds, "curve": run.curve}
    save_model_folder(final, run.model, run.tokenizer, _DONE_FILE, info)
    log.info(
        "warm_start: trained %d steps of %s into %s (%.1fs)",
        key["steps"], base, final, time.perf_counter() - t0,
    )  # fmt: skip
    return str(final)
