"""The built-in models' SFT warm starts (``"tiny-sft"``, ``"suite-sft"``), trained once and cached.

:func:`warm_start` runs SFT (:mod:`slca_lightning.models.sft`) of a built-in model on
demonstrations of the synthetic suite and caches the result on disk, keyed by its settings.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Any

import torch

from slca_lightning.cache import default_cache_dir, is_complete, save_model_folder
from slca_lightning.models.loading import TINY_HIDDEN_SIZE, TINY_NUM_LAYERS

__all__ = ["WARM_STARTS", "warm_start", "warm_start_key"]

log = logging.getLogger("slca_lightning.policy")  # the logger name the warm start always used

#: Warm-start defaults of the tiny model (measured on 2 CPU cores, see :func:`warm_start`).
WARM_START_STEPS = 300
WARM_START_TASKS = 480
WARM_START_BATCH_SIZE = 8
WARM_START_LR = 5e-3
#: Recipe fixed by the warm start (part of the cache key): weight of the auxiliary
#: NLL on prompt/tool tokens, linear decay to 10% of the learning rate, warmup steps.
WARM_START_RECIPE = {"context_weight": 1.0, "final_lr_fraction": 0.1, "warmup_steps": 10}

#: Per built-in model: SFT steps, demonstrations, batch size, learning rate, the fixed
#: recipe, and the task indices left out of the demonstrations (``skip``: the RL held-out
#: split ``[256, 512)`` of ``SyntheticTasks(seed=0, n_train=256)``, any ``n_heldout`` ≤ 256).
#: The suite model's budget is fixed by held-out demonstration loss alone
#: (``experiments/warm_start/README.md``), never by what RL does afterwards.
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
        "steps": 600,
        "n_tasks": 1024,
        "batch_size": 16,
        "learning_rate": 2e-3,
        "recipe": {"context_weight": 1.0, "final_lr_fraction": 0.1, "warmup_steps": 20},
        "skip": (256, 512),
    },
}
#: The suite model trained on pooled demonstrations: the same tasks, recipe and budget as
#: ``"suite"``, but half of the demonstrations (drawn per task, seeded) write their calls'
#: arguments as a JSON string, as OpenAI-format logs store them; the agent loop rejects
#: such calls (METHOD §4.1 requires an object). Imitation learns both sources; the reward
#: tells them apart (``experiments/learning/README.md``).
WARM_STARTS["suite-pooled"] = {
    **WARM_STARTS["suite"],
    "model": "suite",
    "string_arguments_fraction": 0.5,
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


def warm_start(
    cache_dir: str | None = None,
    steps: int | None = None,
    seed: int = 0,
    n_tasks: int | None = None,
    batch_size: int | None = None,
    learning_rate: float | None = None,
    base: str = "tiny",
) -> str:
    """SFT a built-in model on synthetic demonstrations; return the saved folder.

    ``base`` is ``"tiny"``, ``"suite"`` or ``"suite-pooled"`` (the suite model on pooled
    demonstrations); the other settings default to that entry of :data:`WARM_STARTS`. The
    folder is ``<cache_dir>/<base>-sft-<hash of warm_start_key(...)>``
    (``cache_dir`` defaults to :func:`default_cache_dir`). When it already holds a complete
    save it is returned at once; otherwise the model is trained (seeded, deterministic:
    equal settings give equal weights), saved with ``save_pretrained`` (model and
    tokenizer) into a temporary folder next to it, and renamed into place, so an
    interrupted run never leaves a partial cache. A log line (logger
    ``slca_lightning.policy``) says whether it trained or reused the cache, and how long
    that took.

    Both recipes add an auxiliary NLL on prompt and tool tokens (``context_weight=1``):
    for these from-scratch models it more than doubles how often greedy decoding names a
    right tool after the same number of steps. The suite model's demonstrations leave out
    the RL held-out tasks (``skip``), so held-out evaluation never scores a memorised demo.
    """
    import lightning

    from slca_lightning.models.sft import SFTDataModule, SFTModule

    key = warm_start_key(base, steps, seed, n_tasks, batch_size, learning_rate)
    spec = WARM_STARTS[base]
    steps, n_tasks, batch_size = key["steps"], key["n_tasks"], key["batch_size"]
    learning_rate, recipe = key["learning_rate"], spec["recipe"]
    arch, skip = spec.get("model", base), spec["skip"]
    pooled = spec.get("string_arguments_fraction", 0.0)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    root = Path(cache_dir or default_cache_dir()).expanduser()
    final = root / f"{base}-sft-{digest}"
    t0 = time.perf_counter()
    if is_complete(final, _DONE_FILE):
        log.info("warm_start: reused cached %s (%.2fs)", final, time.perf_counter() - t0)
        return str(final)
    root.mkdir(parents=True, exist_ok=True)
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    lightning.seed_everything(seed, verbose=False)
    module = SFTModule(model=arch, learning_rate=learning_rate, seed=seed, **recipe)
    data = SFTDataModule(
        n_tasks=n_tasks, seed=seed, batch_size=batch_size, skip=skip,
        string_arguments_fraction=pooled,
    )  # fmt: skip
    from slca_lightning.console import StepProgressBar  # one bar: "SFT warm start: k/steps"

    quiet = {"enable_model_summary": False, "callbacks": [StepProgressBar("SFT warm start")]}
    trainer = lightning.Trainer(
        accelerator="cpu", devices=1, max_steps=steps, logger=False, enable_checkpointing=False,
        deterministic=True, gradient_clip_val=1.0, **quiet,
    )  # fmt: skip
    try:
        trainer.fit(module, datamodule=data)
    finally:  # deterministic=True flips a process-wide flag: put it back
        torch.use_deterministic_algorithms(was_deterministic)
    info = {**key, "seconds": round(time.perf_counter() - t0, 2)}
    save_model_folder(final, module.model, module.tokenizer, _DONE_FILE, info)
    log.info("warm_start: trained %d steps into %s (%.1fs)", steps, final, time.perf_counter() - t0)
    return str(final)
