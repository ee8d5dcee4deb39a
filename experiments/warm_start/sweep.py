"""Held-out demonstration loss of the suite model's SFT warm start, step by step.

Fixes the SFT budget by an SFT-only criterion: the NLL of the assistant tokens of the
reference demonstrations of the RL held-out tasks (``SyntheticTasks(seed=0, n_train=256)``'s
held-out split, indices 256-319, which the warm start never trains on), measured every
``--every`` steps while training with the warm-start recipe of ``WARM_STARTS["suite"]``.
Nothing here looks at RL.

    python experiments/warm_start/sweep.py --steps 800 --every 100 --out experiments/warm_start/sweep.csv
"""

from __future__ import annotations

import argparse
import csv
import os
import time

import lightning
import torch

from slca_lightning.data import SyntheticTaskGenerator, builtin_suite, reference_answer
from slca_lightning.models.sft import SFTDataModule, SFTModule, build_sft_example
from slca_lightning.models.warm_start import WARM_STARTS


def heldout_batches(tokenizer, lo: int = 256, hi: int = 320, batch_size: int = 16):
    suite = builtin_suite()
    tasks = SyntheticTaskGenerator(0, suite=suite).generate(hi)[lo:hi]
    rows = [build_sft_example(tokenizer, t.messages + reference_answer(t, suite)) for t in tasks]
    dm = SFTDataModule(tokenizer)
    return [dm.collate(rows[i : i + batch_size]) for i in range(0, len(rows), batch_size)]


def heldout_nll(module, batches) -> float:
    """Token-weighted mean NLL of ``module`` (an SFTModule) over ``batches``, in eval mode
    (the module is put back in train mode), on the module's device."""
    module.eval()
    with torch.no_grad():
        dev = module.device
        parts = [module.loss({k: v.to(dev) for k, v in b.items()}) for b in batches]
    module.train()
    n = sum(float(p["tokens"]) for p in parts)
    return sum(float(p["nll"]) * float(p["tokens"]) for p in parts) / n


class _Probe(lightning.Callback):
    def __init__(self, batches, every, writer, t0, save_at=(), save_dir=None):
        self.batches, self.every, self.writer, self.t0 = batches, every, writer, t0
        self.save_at, self.save_dir = set(save_at), save_dir

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step % self.every:
            return
        nll = heldout_nll(module, self.batches)
        row = {
            "step": step,
            "heldout_nll": round(nll, 4),
            "seconds": round(time.perf_counter() - self.t0, 1),
        }
        print(row, flush=True)
        self.writer.writerow(row)
        if step in self.save_at and self.save_dir:
            out = os.path.join(self.save_dir, f"step{step}")
            module.model.save_pretrained(out)
            module.tokenizer.save_pretrained(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument(
        "--n-tasks", type=int, default=None, help="demonstrations (default: the recipe's)"
    )
    ap.add_argument("--out", default="experiments/warm_start/sweep.csv")
    ap.add_argument("--save-at", type=int, nargs="*", default=[])
    ap.add_argument("--save-dir", default=None)
    ap.add_argument("--whole-numbers", action="store_true", help="suite tokenizer variant")
    args = ap.parse_args()
    if args.whole_numbers:
        from slca_lightning.models import suite

        suite.WHOLE_NUMBERS = True
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    spec = WARM_STARTS["suite"]
    lr = spec["learning_rate"] if args.lr is None else args.lr
    lightning.seed_everything(0, verbose=False)
    module = SFTModule(model="suite", learning_rate=lr, seed=0, **spec["recipe"])
    module.configure_model()
    data = SFTDataModule(
        module.tokenizer,
        n_tasks=spec["n_tasks"],
        seed=0,
        batch_size=spec["batch_size"],
        skip=spec["skip"],
    )
    t0 = time.perf_counter()
    with open(args.out, "w", newline="") as fh:
        writer = csv.DictWriter(fh, ["step", "heldout_nll", "seconds"])
        writer.writeheader()
        trainer = lightning.Trainer(
            accelerator="cpu", devices=1, max_steps=args.steps, logger=False,
            enable_checkpointing=False, gradient_clip_val=1.0, enable_progress_bar=False,
            enable_model_summary=False, callbacks=[
                _Probe(heldout_batches(module.tokenizer), args.every, writer, t0, args.save_at, args.save_dir)
            ],
        )  # fmt: skip
        trainer.fit(module, datamodule=data)
    print(f"threads={torch.get_num_threads()} lr={lr} total {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    main()
