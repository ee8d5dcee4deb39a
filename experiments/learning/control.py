"""The control of the learning experiment: RL's wall time spent on more SFT instead.

Starts from the same cached warm start as the config (``model.model``: ``suite-sft`` or
``suite-pooled-sft``), continues SFT with that warm start's own recipe (its
demonstrations, pooled ones included, which skip the held-out tasks, the
auxiliary context loss, its batch size) at the learning rate its schedule had at the selected
step (held), until ``--seconds`` of wall time are spent, then evaluates
on the quickstart's held-out tasks exactly as its ``InDomainEval`` does (greedy, same
caps, simulator and reward head, plus the reference judge)::

    python -m experiments.learning.control --seconds 300 --seed 0 --out control.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import lightning
import torch

ROOT = Path(__file__).resolve().parents[2]


class _Deadline(lightning.Callback):
    """Stops training once ``seconds`` of wall time have passed since fit start."""

    def __init__(self, seconds: float):
        self.seconds, self.t0, self.steps = seconds, 0.0, 0

    def on_train_start(self, trainer, module):
        self.t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.steps += 1
        if time.perf_counter() - self.t0 >= self.seconds:
            trainer.should_stop = True


def warm_start_of(config: Path) -> tuple[str, str]:
    """``(model.model, its WARM_STARTS entry)`` of an RL config, e.g. ``("suite-sft",
    "suite")``; ``ValueError`` when the model is not one of the suite model's warm starts."""
    import yaml

    from slca_lightning.models.names import warm_start_base
    from slca_lightning.models.warm_start import WARM_STARTS

    name = str(yaml.safe_load(config.read_text())["model"]["model"])
    base = warm_start_base(name)
    if base is None or WARM_STARTS[base].get("model", base) != "suite":
        suites = [f"{b}-sft" for b, s in WARM_STARTS.items() if s.get("model", b) == "suite"]
        raise ValueError(f"{config}: model.model {name!r} is not one of {suites}")
    return name, base


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--config", default=str(ROOT / "configs" / "quickstart.yaml"))
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)

    from callbacks.in_domain_eval import second_judge_metrics
    from slca_lightning.cli.commands import main as cli_main
    from slca_lightning.eval.in_domain import evaluate_in_domain
    from slca_lightning.models.sft import SFTDataModule, SFTModule
    from slca_lightning.models.warm_start import (
        WARM_STARTS,
        learning_rate_at,
        selected_step,
        warm_start,
    )
    from slca_lightning.rewards import ReferenceJudge

    name, base = warm_start_of(Path(args.config))
    spec = WARM_STARTS[base]
    recipe = dict(spec["recipe"])
    recipe.pop("final_lr_fraction")
    lr = learning_rate_at(base, selected_step(name))  # where the warm start's schedule stood
    recipe["warmup_steps"] = 0
    lightning.seed_everything(args.seed, verbose=False)
    module = SFTModule(model=warm_start(base=base), learning_rate=lr, seed=args.seed, **recipe)
    module.configure_model()
    data = SFTDataModule(
        module.tokenizer,
        n_tasks=spec["n_tasks"],
        seed=0,
        batch_size=spec["batch_size"],
        skip=spec["skip"],
        string_arguments_fraction=spec.get("string_arguments_fraction", 0.0),
    )
    data.seed = args.seed  # the same demonstrations, this seed's order (batch sampler seed)
    deadline = _Deadline(args.seconds)
    trainer = lightning.Trainer(
        accelerator="cpu", devices=1, max_steps=-1, max_epochs=1000, logger=False,
        enable_checkpointing=False, gradient_clip_val=1.0, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[deadline],
    )  # fmt: skip
    trainer.fit(module, datamodule=data)
    trained = time.perf_counter() - deadline.t0

    cli = cli_main(["--config", args.config, f"--seed_everything={args.seed}"], run=False)
    head, dm = cli.model.reward_head, cli.datamodule
    (evaluator,) = [c for c in cli.trainer.callbacks if type(c).__name__ == "InDomainEval"]
    policy = module.model.eval()
    with torch.no_grad():
        result = evaluate_in_domain(policy, module.tokenizer, head, dm, evaluator.num_tasks)
    metrics = dict(result.metrics)
    metrics.update(second_judge_metrics(head, ReferenceJudge(), result.episodes, "reference"))
    out = {
        "seed": args.seed,
        "warm_start": name,
        "seconds_budget": args.seconds,
        "seconds_trained": round(trained, 1),
        "sft_steps": deadline.steps,
        "learning_rate": lr,
        "metrics": metrics,
    }
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
