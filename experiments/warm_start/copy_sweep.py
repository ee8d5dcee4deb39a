"""Does the suite model's SFT warm start learn to copy argument values, and when?

Trains one warm-start variant (model size, context weight, learning rate, batch, number of
demonstrations) and every ``--every`` steps measures, on the 64 RL held-out tasks
(``SyntheticTasks(seed=0, n_train=256)``, indices 256-319, never trained on):

* the NLL of the assistant tokens of their reference demonstrations (the SFT-only
  criterion that fixes the budget), and
* greedy episodes through the real agent loop (simulator, the quickstart's caps): exact
  episodes per task kind (= strict tool accuracy), name F1 and value score.

One JSON line per measurement goes to ``--out`` (appended, so several variants can share a
file). Runs on CPU or CUDA (``--device``); nothing here looks at RL.

    python experiments/warm_start/copy_sweep.py --name base --steps 400 --every 100
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time

import lightning
import torch

from slca_lightning.eval.in_domain import greedy_loop
from slca_lightning.eval.metrics import episode_stats
from slca_lightning.models import suite
from slca_lightning.models.sft import SFTDataModule, SFTModule
from slca_lightning.models.warm_start import WARM_STARTS

try:
    from experiments.warm_start.sweep import heldout_batches, heldout_nll
except ImportError:  # run as a script from the repository root
    from sweep import heldout_batches, heldout_nll  # type: ignore[no-redef]


def greedy_exact(model, tokenizer, n_tasks: int = 64) -> dict:
    """Greedy held-out episodes: exact count per task kind, name F1 and value score."""
    from slca_lightning.data.task_sources import SyntheticTasks
    from slca_lightning.rollout.datamodule import RolloutDataModule

    dm = RolloutDataModule(
        tasks=SyntheticTasks(n_train=256, n_heldout=n_tasks, seed=0),
        max_turns=3, max_new_tokens=96, max_response_tokens=320, max_tool_response_tokens=96,
    )  # fmt: skip
    loop = greedy_loop(dm, model, tokenizer, batch_size=n_tasks)
    was = model.training
    model.eval()
    with torch.no_grad():
        episodes = loop.run(dm.source.heldout()[:n_tasks], group_size=1)
    model.train(was)
    exact: dict[str, float] = collections.Counter()
    count: dict[str, int] = collections.Counter()
    name = value = 0.0
    for ep in episodes:
        st = episode_stats(ep)
        kind = ep.task.metadata.get("kind", "?")
        count[kind] += 1
        exact[kind] += st.exact
        name, value = name + st.name_f1, value + st.value
    n = len(episodes)
    return {
        "exact": sum(exact.values()),
        "exact_by_kind": {k: f"{int(exact[k])}/{count[k]}" for k in sorted(count)},
        "name_f1": round(name / n, 3),
        "value": round(value / n, 3),
    }


class _Probe(lightning.Callback):
    def __init__(self, args, batches, t0):
        self.args, self.batches, self.t0 = args, batches, t0

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step % self.args.every and step != self.args.steps:
            return
        row = {
            "name": self.args.name,
            "step": step,
            "heldout_nll": round(heldout_nll(module, self.batches), 4),
            **greedy_exact(module.model, module.tokenizer),
            "seconds": round(time.perf_counter() - self.t0, 1),
        }
        print(json.dumps(row), flush=True)
        with open(self.args.out, "a") as fh:
            fh.write(json.dumps({**row, "settings": vars(self.args)}) + "\n")


def main() -> None:
    spec = WARM_STARTS["suite"]
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--lr", type=float, default=spec["learning_rate"])
    ap.add_argument("--batch", type=int, default=spec["batch_size"])
    ap.add_argument("--n-tasks", type=int, default=spec["n_tasks"])
    ap.add_argument("--context-weight", type=float, default=spec["recipe"]["context_weight"])
    ap.add_argument("--warmup", type=int, default=spec["recipe"]["warmup_steps"])
    ap.add_argument("--final-lr", type=float, default=spec["recipe"]["final_lr_fraction"])
    ap.add_argument("--hidden", type=int, default=suite.SUITE_HIDDEN_SIZE)
    ap.add_argument("--layers", type=int, default=suite.SUITE_NUM_LAYERS)
    ap.add_argument(
        "--whole-numbers",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="suite tokenizer with whole-number tokens (default: suite.WHOLE_NUMBERS)",
    )
    ap.add_argument("--save", default=None, help="save the final model and tokenizer here")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default="copy_sweep.jsonl")
    args = ap.parse_args()
    suite.SUITE_HIDDEN_SIZE, suite.SUITE_NUM_LAYERS = args.hidden, args.layers
    if args.whole_numbers is not None:
        suite.WHOLE_NUMBERS = args.whole_numbers
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    lightning.seed_everything(0, verbose=False)
    module = SFTModule(
        model="suite", learning_rate=args.lr, seed=0, context_weight=args.context_weight,
        warmup_steps=args.warmup, final_lr_fraction=args.final_lr,
    )  # fmt: skip
    module.configure_model()
    data = SFTDataModule(
        module.tokenizer, n_tasks=args.n_tasks, seed=0, batch_size=args.batch, skip=spec["skip"]
    )
    t0 = time.perf_counter()
    trainer = lightning.Trainer(
        accelerator=args.device, devices=1, max_steps=args.steps, logger=False,
        enable_checkpointing=False, gradient_clip_val=1.0, enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[_Probe(args, heldout_batches(module.tokenizer), t0)],
    )  # fmt: skip
    trainer.fit(module, datamodule=data)
    if args.save:
        module.model.save_pretrained(args.save)
        module.tokenizer.save_pretrained(args.save)
    print(f"{args.name}: threads={torch.get_num_threads()} total {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    main()
