"""Are a model's default learning rates sane? How far a few AdamW steps at each rate move it.

::

    python experiments/smollm2/lr_check.py --model smollm2-135m-instruct --out experiments/smollm2/results/lr_check.json
    python experiments/smollm2/lr_check.py --table experiments/smollm2/results/lr_check.json --embed experiments/smollm2/README.md

From the same starting weights, for each learning rate: ``--steps`` AdamW steps (betas 0.9,
0.95, no warm-up: the worst case) of the SFT loss on one fixed batch of suite demonstrations
(tasks 0–3), then, on the assistant tokens of 4 held-out demonstrations (tasks 256–259):
the mean per-token KL(start ‖ stepped) and the NLL before and after. The rates marked
``default`` are :func:`~slca_lightning.models.pretrained.default_learning_rate` of the model
(SFT and RL). With Adam the first steps move every weight by about the learning rate
whatever the loss, so the same figure reads for the first RL updates too (an RL loss would
change the direction, not the size).

The check is what "does not blow up" means here: at the defaults the held-out NLL does
not rise and the KL stays small; the table shows where it stops being so.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script
from experiments.common import replace_block

#: The README block this check writes (``--embed experiments/smollm2/README.md``).
BEGIN, END = "<!-- lr check: begin -->", "<!-- lr check: end -->"


def demo_batches(tokenizer, lo: int, n: int) -> dict[str, torch.Tensor]:
    """One right-padded SFT batch of the suite demonstrations of tasks ``lo … lo + n − 1``."""
    from slca_lightning.data import SyntheticTaskGenerator, builtin_suite, reference_answer
    from slca_lightning.models.sft import SFTDataModule, build_sft_example

    suite = builtin_suite()
    tasks = SyntheticTaskGenerator(0, suite=suite).generate(lo + n)[lo:]
    rows = [build_sft_example(tokenizer, t.messages + reference_answer(t, suite)) for t in tasks]
    return SFTDataModule(tokenizer).collate(rows)


def token_logprobs(model, batch) -> torch.Tensor:
    """Full log-softmax ``[B, T-1, V]`` at every position (float32)."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return torch.log_softmax(logits[:, :-1].float(), dim=-1)


def measure(start, model, heldout) -> dict[str, float]:
    """KL(start ‖ model) per assistant token and both NLLs on ``heldout``."""
    mask = (heldout["loss_mask"] & heldout["attention_mask"])[:, 1:]
    target = heldout["input_ids"][:, 1:, None]
    with torch.no_grad():
        p, q = token_logprobs(start, heldout), token_logprobs(model, heldout)
    kl = (p.exp() * (p - q)).sum(-1)
    nll_p, nll_q = -p.gather(-1, target)[..., 0], -q.gather(-1, target)[..., 0]
    n = mask.sum()
    return {
        "kl_per_token": float((kl * mask).sum() / n),
        "nll_start": float((nll_p * mask).sum() / n),
        "nll_after": float((nll_q * mask).sum() / n),
    }


def main(argv: list[str] | None = None) -> dict:
    from slca_lightning.models.policy import load_policy
    from slca_lightning.models.pretrained import default_learning_rate
    from slca_lightning.models.sft import SFTModule

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument(
        "--lrs", nargs="+", type=float, default=None, help="default: around the defaults"
    )
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None)
    p.add_argument("--embed", default=None, help=f"write the table between {BEGIN!r} and its end")
    p.add_argument("--table", default=None, help="an --out JSON: print (and --embed) its table")
    args = p.parse_args(argv)
    if args.table:
        result = json.loads(Path(args.table).read_text())
        print(table(result))
        if args.embed:
            replace_block(args.embed, BEGIN, END, table(result))
        return result
    torch.set_num_threads(args.threads)
    defaults = {stage: default_learning_rate(args.model, stage)[0] for stage in ("sft", "rl")}
    lrs = args.lrs or sorted({defaults["rl"], defaults["sft"], 10 * defaults["sft"], 1e-3, 3e-3})
    t0 = time.perf_counter()
    start, tokenizer = load_policy(args.model)
    start.eval()
    train, heldout = demo_batches(tokenizer, 0, 4), demo_batches(tokenizer, 256, 4)
    rows = []
    for lr in lrs:
        sft = SFTModule(model=args.model, learning_rate=lr)
        sft.model, sft.tokenizer = copy.deepcopy(start).train(), tokenizer
        opt = torch.optim.AdamW(sft.model.parameters(), lr, (0.9, 0.95), weight_decay=0.0)
        for _ in range(args.steps):
            loss = sft.loss(train)["loss"]
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(sft.model.parameters(), 1.0)
            opt.step()
        marks = [stage for stage, value in defaults.items() if value == lr]
        rows.append({"lr": lr, "default_for": marks, **measure(start, sft.model.eval(), heldout)})
        print(json.dumps(rows[-1]), flush=True)
        del sft, opt
    result = {
        "model": args.model,
        "steps": args.steps,
        "threads": args.threads,
        "defaults": defaults,
        "seconds": round(time.perf_counter() - t0, 1),
        "rows": rows,
    }
    print(table(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    if args.embed:
        replace_block(args.embed, BEGIN, END, table(result))
    return result


def table(result: dict) -> str:
    """The check as a Markdown table."""
    lines = [
        f"`{result['model']}`, {result['steps']} AdamW steps from the same start "
        f"({result['threads']} thread, {result['seconds']} s)",
        "",
        "| learning rate | default for | KL per token | held-out NLL start → after |",
        "|---:|---|---:|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['lr']:g} | {', '.join(r['default_for']) or '–'} | {r['kl_per_token']:.2e} "
            f"| {r['nll_start']:.3f} → {r['nll_after']:.3f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
