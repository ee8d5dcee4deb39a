"""``slca warm-start NAME``: train a built-in warm start by its recipe and write the files
that ship it (``<name>.safetensors`` and its manifest ``<name>.json``).

The recipe is :data:`slca_lightning.models.warm_start.WARM_STARTS` (the step is chosen by
its SFT-only rule: the lowest validation-demonstration NLL); every selection point also
records, for the reader only, greedy episodes on the 64 validation tasks. After training the
command records the selected weights' greedy episodes on held-out tasks 256–319 (the
quickstart's evaluation, its caps): the count of exact episodes and, for the first
:data:`RECORDED_TASKS`, every assistant turn's text, which the tests replay.

    slca warm-start suite-pooled-sft              # writes slca_lightning/models/weights/
    slca warm-start suite-sft --out /tmp/ws --threads 2
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["RECORDED_TASKS", "build", "greedy_record", "main"]

#: Held-out tasks whose greedy transcripts each manifest records (tasks 256..263).
RECORDED_TASKS = 8
#: The quickstart's episode caps (configs/quickstart.yaml), used by every record.
_CAPS = {"max_turns": 3, "max_new_tokens": 96, "max_response_tokens": 320}
_CAPS["max_tool_response_tokens"] = 96


def greedy_record(model: Any, tokenizer: Any, start: int, n: int, texts: bool = False) -> dict:
    """Greedy episodes of ``model`` on synthetic tasks ``[start, start + n)`` of seed 0,
    with the quickstart's caps and simulator: exact episodes (strict tool accuracy), call
    validity, and with ``texts`` each episode's assistant turns."""
    import torch

    from slca_lightning.data.task_sources import SyntheticTasks
    from slca_lightning.eval.in_domain import greedy_loop
    from slca_lightning.eval.metrics import episode_stats
    from slca_lightning.rollout.datamodule import RolloutDataModule

    dm = RolloutDataModule(
        tasks=SyntheticTasks(n_train=0, n_heldout=n, seed=0, heldout_start=start), **_CAPS
    )
    was = model.training
    model.eval()
    with torch.no_grad():
        episodes = greedy_loop(dm, model, tokenizer, batch_size=64).run(
            dm.source.heldout()[:n], group_size=1
        )
    model.train(was)
    stats = [episode_stats(ep) for ep in episodes]
    attempts = sum(s.call_attempts for s in stats)
    out: dict[str, Any] = {
        "tasks": [start, start + n],
        "exact": int(sum(s.exact for s in stats)),
        "call_validity": round(sum(s.valid_calls for s in stats) / attempts, 4)
        if attempts
        else None,
    }
    if texts:
        out["episodes"] = [
            {
                "task_id": ep.task.task_id,
                "exact": bool(st.exact),
                "assistant": list(ep.assistant_texts),
            }
            for ep, st in zip(episodes, stats)
        ]
    return out


def build(
    name: str, out: Path, threads: int | None = None, max_steps: int | None = None
) -> dict[str, Any]:
    """Train ``name`` (``"suite-sft"``, ``"suite-pooled-sft"``), write its safetensors file
    and manifest into ``out``; returns the manifest."""
    import torch
    import transformers
    from safetensors.torch import save_model

    from slca_lightning.models.names import warm_start_base
    from slca_lightning.models.shipped import file_sha256, tokenizer_digest
    from slca_lightning.models.warm_start import WARM_STARTS, train_warm_start

    base = warm_start_base(name)
    if base is None or "selection" not in WARM_STARTS[base]:
        ships = sorted(f"{b}-sft" for b, s in WARM_STARTS.items() if "selection" in s)
        raise ValueError(
            f"slca warm-start: {name!r} is not a warm start that ships; choose {ships}"
        )
    if threads:
        torch.set_num_threads(threads)
    lo, hi = WARM_STARTS[base]["selection"]["validation"]
    t0 = time.perf_counter()
    from slca_lightning.training.console import StepProgressBar

    run = train_warm_start(
        base,
        max_steps=max_steps,
        callbacks=[StepProgressBar(f"SFT warm start {name}")],
        probe=lambda m, t: {"validation_exact": greedy_record(m, t, lo, hi - lo)["exact"]},
    )
    train_seconds = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    file = out / f"{name}.safetensors"
    tmp = file.with_suffix(".safetensors.tmp")
    save_model(run.model, str(tmp), metadata={"warm_start": name, "step": str(run.step)})
    os.chmod(tmp, 0o644)
    os.replace(tmp, file)
    heldout = greedy_record(run.model, run.tokenizer, 256, 64)
    recorded = greedy_record(run.model, run.tokenizer, 256, RECORDED_TASKS, texts=True)
    info = {
        "name": name,
        "file": file.name,
        "sha256": file_sha256(file),
        "bytes": file.stat().st_size,
        "dtype": "float32",
        "parameters": sum(p.numel() for p in run.model.parameters()),
        "command": f"slca warm-start {name}",
        "settings": run.key,
        "step": run.step,
        "rule": (
            f"the step of {run.key['selection']['step_of']}'s rule"
            if "step_of" in run.key.get("selection", {})
            else "lowest validation NLL"
        ),
        "curve": run.curve,
        "loss_prefix": run.losses[:8],
        "train_seconds": round(train_seconds, 1),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "built": datetime.date.today().isoformat(),
        "tokenizer_sha256": tokenizer_digest(run.tokenizer),
        "heldout_greedy": heldout,
        "recorded_greedy": recorded,
    }
    (out / f"{name}.json").write_text(json.dumps(info, indent=1) + "\n")
    print(
        f"{name}: step {run.step} of {run.key['steps']} ({info['rule']}), "
        f"{file} ({info['bytes'] / 1e6:.1f} MB, sha256 {info['sha256'][:12]}), "
        f"held-out exact {heldout['exact']}/64, {train_seconds / 60:.1f} min on "
        f"{info['threads']} thread(s)"
    )
    return info


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """``slca warm-start NAME [--out DIR] [--threads N]``."""
    from slca_lightning.models.shipped import WEIGHTS_DIR

    p = argparse.ArgumentParser(
        prog="slca warm-start",
        description="Retrain a shipped warm start by its recipe (SFT-only step selection) and "
        "write <name>.safetensors and <name>.json (about an hour on 2 CPU cores).",
    )
    p.add_argument("name", help="suite-sft or suite-pooled-sft")
    p.add_argument(
        "--out", default=str(WEIGHTS_DIR), help="folder to write (default: the package's)"
    )
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--max-steps", type=int, default=None, help="stop early (a check, not a build)")
    args = p.parse_args(sys.argv[2:] if argv is None else argv)
    return build(args.name, Path(args.out), args.threads, args.max_steps)
