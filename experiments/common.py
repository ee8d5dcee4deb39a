"""What more than one study uses: one definition each, imported from here alone.

- :func:`replace_block`: rewrite the generated block between two marker lines of a Markdown
  file (the READMEs' tables);
- :func:`child_command` and :func:`child`: run a python module in a child process with a set
  number of torch threads, recording its wall time and peak RSS;
- :func:`read_metrics`: a run's ``metrics.csv`` as training-step and evaluation rows;
- :func:`read_jsonl`: a JSON-lines file (saved episodes, sweep records) as a list of rows;
- :func:`config_policy`: a ``slca fit`` config's CLI objects and its policy, not trained;
- :func:`call_turns` (an episode's call turns), :func:`stop_stats` and :func:`short_stats`:
  on saved held-out episodes (``in_domain_episodes/*.jsonl``), the multi-step or multi-call
  tasks a policy answered before making all their calls.

A study's own helpers stay in its folder; a study imports another study's code only through
this module.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

#: The repository root (child processes run from it).
ROOT = Path(__file__).resolve().parents[1]

__all__ = [
    "ROOT",
    "call_turns",
    "child",
    "child_command",
    "config_policy",
    "read_jsonl",
    "read_metrics",
    "replace_block",
    "short_stats",
    "stop_stats",
]


def replace_block(path: Path | str, begin: str, end: str, body: str) -> None:
    """Write ``body`` between the first ``begin`` marker of ``path`` and the ``end`` after it.

    The generated tables sit between an HTML-comment pair (``<!-- ...: begin -->`` …
    ``<!-- ...: end -->``); this is the one place that rewrites such a block, so every
    generator keeps the markers and the text around them as they are. The markers stay on
    lines of their own (``body`` gets exactly one newline before ``end``); a file without
    both markers, in that order, is a ``ValueError`` naming the file and marker.
    """
    path = Path(path)
    text = path.read_text()
    if begin not in text:
        raise ValueError(f"{path}: no {begin!r} marker to replace the block after")
    head, rest = text.split(begin, 1)
    if end not in rest:
        raise ValueError(f"{path}: no {end!r} marker after {begin!r}")
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{begin}\n{body.rstrip(chr(10))}\n{end}{tail}")


def child_command(argv: list[str], threads: int) -> dict:
    """``subprocess`` keyword arguments that run ``argv`` (a python module and its args) with
    ``threads`` torch threads from the repository root; the child prints ``PEAK_RSS_KB``."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
    code = (
        "import resource, runpy, sys, json, torch; "
        f"torch.set_num_threads({threads}); "
        f"sys.argv = {argv!r}; "
        "rc = 0\n"
        "try:\n    runpy.run_module(sys.argv[0], run_name='__main__')\n"
        "except SystemExit as e:\n    rc = e.code or 0\n"
        "print('PEAK_RSS_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
        "sys.exit(rc)"
    )
    return {"args": [sys.executable, "-c", code], "env": env, "cwd": ROOT}


def child(argv: list[str], log: Path, threads: int) -> dict:
    """Run ``argv`` (a python module and args) in a child; its wall time and peak RSS."""
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.run(**child_command(argv, threads), stdout=fh, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - t0
    peak = 0
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("PEAK_RSS_KB"):
            peak = int(line.split()[1])
    if proc.returncode:
        raise RuntimeError(f"{argv[0]} failed (exit {proc.returncode}); see {log}")
    return {"wall_s": round(wall, 1), "peak_rss_gb": round(peak / 2**20, 2)}


def read_jsonl(path: Path | str) -> list[dict]:
    """The JSON object on each non-blank line of ``path``."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def read_metrics(folder: Path) -> tuple[list[dict], list[dict]]:
    """(training-step rows, in-domain evaluation rows) of a run's metrics.csv."""
    (path,) = sorted(folder.glob("logs/version_*/metrics.csv"))[-1:]
    rows = list(csv.DictReader(path.open()))
    train = [r for r in rows if r.get("reward/total")]
    evals = [r for r in rows if r.get("eval/in_domain/tool_accuracy")]
    return train, evals


def config_policy(config: str, seed: int, checkpoint: str | None = None, model: str | None = None):
    """A config's CLI objects (not run) and its policy in eval mode with its tokenizer.

    Args:
        config: the ``slca fit`` YAML.
        seed: ``seed_everything``.
        checkpoint: an RL checkpoint whose policy weights replace the config's model.
        model: overrides the config's ``model:`` (a source name or folder).

    Returns:
        ``(cli, policy, tokenizer)``.
    """
    import torch

    from slca_lightning.cli.commands import main as cli_main

    cli_args = ["--config", config, f"--seed_everything={seed}"]
    if model:
        cli_args.append(f"--model.model={model}")
    cli = cli_main(cli_args, run=False)
    module = cli.model
    module.configure_model()
    if checkpoint:
        state = torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"]
        weights = {k[len("policy.") :]: v for k, v in state.items() if k.startswith("policy.")}
        module.policy.load_state_dict(weights, strict=True)
    # the sampling temperature is the policy's (model.temperature)
    cli.datamodule.connect(module.policy, module.tokenizer, module.hparams.temperature)
    return cli, module.policy.eval(), module.tokenizer


def call_turns(row: dict) -> int:
    """An episode's call turns: assistant turns that got observations back."""
    return sum(1 for obs in row.get("observations") or [] if obs)


def stop_stats(rows: list[dict]) -> dict[str, int]:
    """On the episodes whose gold has more than one step: ``early`` (answered after fewer
    call turns than gold steps, at least one), ``complete`` (as many or more), ``none`` (no
    call) and ``unanswered`` (ended on a call: a turn or token cap). A call turn is an
    assistant turn that got observations back (``observations[t]`` non-empty)."""
    out = {"multistep": 0, "early": 0, "complete": 0, "none": 0, "unanswered": 0}
    for row in rows:
        steps = len(row["gold"])
        if steps < 2:
            continue
        out["multistep"] += 1
        observed = row.get("observations") or []
        calls = call_turns(row)
        if calls == 0:
            out["none"] += 1
        elif observed[-1]:
            out["unanswered"] += 1
        else:
            out["early" if calls < steps else "complete"] += 1
    return out


def short_stats(rows: list[dict]) -> dict[str, int]:
    """On the episodes whose gold has more than one call (multi-step or parallel): ``short``,
    answered after fewer calls than gold has (at least one; a call is one observation), of
    ``multicall``. Stopping early shows here on parallel tasks too, where ``stop_stats``
    (which counts call turns against steps) does not see it."""
    out = {"multicall": 0, "short": 0}
    for row in rows:
        gold = sum(len(step) for step in row["gold"])
        if gold < 2:
            continue
        out["multicall"] += 1
        observed = row.get("observations") or []
        made = sum(len(obs) for obs in observed)
        out["short"] += 0 < made < gold and not observed[-1]
    return out
