"""Where a fit goes, through the CLI in-process on the tiny model (CPU, a few seconds each).

- The shipped quickstart (made small) prints its run folder at the start and, at the end, one
  short block with ``checkpoints/last.ckpt`` and the reports the callbacks wrote; the path
  ``slca eval --help`` shows as its example is one the quickstart really writes; the
  in-domain table on the console fits 100 columns.
- A fit of 2 steps resumed from its ``last.ckpt`` to 4 steps continues in the same version
  folder: every step's metrics once in one ``metrics.csv`` (none lost, none twice), the
  TensorBoard events in the same folder, the printed line saying so.
- A checkpoint outside a version folder starts a new folder, and the first line says why.

Real parts: LightningCLI, Trainer, ModelCheckpoint, CSV and TensorBoard loggers, HFEngine
sampling from the policy, the agent loop and simulator, InDomainEval. Boundary: the reward
head is TokenParityReward where a fit must learn (see test_fit.py).
"""

from __future__ import annotations

import csv
import re
import shutil
from pathlib import Path

import torch

from slca_lightning.cli import evaluate as standalone
from slca_lightning.cli.commands import main

ROOT = Path(__file__).resolve().parents[2]


def test_the_quickstart_says_where_it_writes_and_writes_last_ckpt(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the quickstart writes to runs/quickstart, relative
    main(
        [
            "fit",
            f"--config={ROOT / 'configs/quickstart.yaml'}",
            "--model.model=tiny",
            "--trainer.max_steps=1",
            "--trainer.enable_progress_bar=false",
            "--data.prompts_per_step=2",
            "--data.group_size=2",
            "--data.max_new_tokens=16",
            "--data.tasks.init_args.n_train=8",
            "--data.tasks.init_args.n_heldout=3",
        ]
    )
    out = capsys.readouterr().out
    folder = Path("runs/quickstart/logs/version_0")
    # 2. one checkpoint, last.ckpt, where slca eval's help example reads it
    ckpts = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.ckpt"))
    assert ckpts == [folder / "checkpoints" / "last.ckpt"], ckpts
    help_text = standalone.build_parser().format_help()
    example = re.search(r"slca eval --checkpoint (\S+)", help_text).group(1)
    assert example == "runs/quickstart/logs/version_0/checkpoints/last.ckpt"
    assert (tmp_path / example).is_file()
    # 1. the run folder at the start, one line, before anything is evaluated or trained
    lines = out.splitlines()
    start = [i for i, line in enumerate(lines) if line.startswith("slca fit: run folder")]
    assert len(start) == 1, out[-3000:]
    assert lines[start[0]].startswith(f"slca fit: run folder {folder} (TensorBoard: ")
    assert start[0] < min(i for i, line in enumerate(lines) if line.startswith("in-domain"))
    # ... and one short block at the end: checkpoint, reports, folders, TensorBoard, eval
    end = lines.index(f"slca fit: done; run folder {folder}")
    block = lines[end:]
    assert 5 <= len(block) <= 9 and max(map(len, block)) <= 100, "\n".join(block)
    text = "\n".join(block)
    assert f"checkpoint   {folder}/checkpoints/last.ckpt" in text
    for report in ("in_domain.md", "in_domain_curves.png", "reward_curves.png", "provenance.json"):
        assert report in text and (folder / report).is_file(), report
    assert "metrics.csv" in text and (folder / "metrics.csv").is_file()
    assert "in_domain_episodes/ (2 files)" in text and "rollouts/ (1 file)" in text
    assert "TensorBoard  runs/quickstart/tb/version_0" in text
    assert f"slca eval --checkpoint {folder}/checkpoints/last.ckpt" in text
    # 5. the in-domain table on the console fits 100 columns; the .md has every column
    heads = [i for i, line in enumerate(lines) if line.startswith("evaluation ")]
    assert heads, out[-3000:]
    for i in heads:
        table = lines[i : lines.index("", i)]
        assert len(table) >= 2 and max(map(len, table)) <= 100, "\n".join(table)
        assert table[0].split()[1] == "tool_accuracy"
    assert max(map(len, (folder / "in_domain.md").read_text().splitlines())) > 100


TINY = [
    "--model.model=tiny",
    "--model.learning_rate=1e-2",
    "--model.micro_batch_size=4",
    "--model.reward_head=slca_lightning.testing.rewards.TokenParityReward",
    "--data.prompts_per_step=2",
    "--data.group_size=3",
    "--data.max_turns=2",
    "--data.max_new_tokens=12",
    "--data.max_response_tokens=64",
    "--data.tasks.class_path=slca_lightning.data.task_sources.SyntheticTasks",
    "--data.tasks.init_args.n_train=16",
    "--data.tasks.init_args.n_heldout=2",
    "--data.tasks.init_args.families=[math]",
    "--trainer.accelerator=cpu",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.log_every_n_steps=1",
    "--trainer.callbacks+=callbacks.InDomainEval",
    "--trainer.callbacks.num_tasks=2",
    "--trainer.callbacks.verbose=false",
]


def fit(root: Path, *extra: str):
    loggers = (
        "--trainer.logger=["
        f"{{class_path: lightning.pytorch.loggers.CSVLogger, init_args: {{save_dir: {root}, name: logs}}}}, "
        f"{{class_path: lightning.pytorch.loggers.TensorBoardLogger, init_args: {{save_dir: {root}, name: tb}}}}]"
    )
    return main(["fit", *TINY, f"--trainer.default_root_dir={root}", loggers, *extra])


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def steps_with(table: list[dict[str, str]], key: str) -> list[int]:
    return [int(r["step"]) for r in table if r.get(key, "") != ""]


def test_a_resumed_run_continues_its_version_folder(tmp_path, capsys):
    fit(tmp_path, "--trainer.max_steps=2")
    last = tmp_path / "logs" / "version_0" / "checkpoints" / "last.ckpt"
    assert last.is_file()
    first = rows(tmp_path / "logs" / "version_0" / "metrics.csv")
    assert steps_with(first, "train/loss") == [0, 1]
    capsys.readouterr()
    cli = fit(tmp_path, "--trainer.max_steps=4", f"--ckpt_path={last}")
    out = capsys.readouterr().out
    assert cli.trainer.global_step == 4
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["version_0"]
    assert sorted(p.name for p in (tmp_path / "tb").iterdir()) == ["version_0"]
    assert len(list((tmp_path / "tb" / "version_0").glob("events.out.tfevents.*"))) == 2
    table = rows(tmp_path / "logs" / "version_0" / "metrics.csv")
    assert table[: len(first)] == [{k: r.get(k, "") for k in table[0]} for r in first]
    assert steps_with(table, "train/loss") == [0, 1, 2, 3]  # each step once, in order
    assert steps_with(table, "reward/total") == [0, 1, 2, 3]
    # the evaluations: at the start, at the first run's end (in its checkpoint: not redone)
    # and at the end of the resumed run
    assert steps_with(table, "eval/in_domain/tokens_per_episode") == [0, 2, 4]
    assert torch.load(last, weights_only=True)["global_step"] == 4
    assert (
        f"slca fit: run folder {tmp_path}/logs/version_0 (TensorBoard: {tmp_path}/tb/version_0; "
        "resumed at step 2: continuing version_0, metrics.csv keeps its 4 rows" in out
    ), out[-3000:]


def test_a_checkpoint_outside_a_version_folder_starts_a_new_one_and_says_so(tmp_path, capsys):
    fit(tmp_path, "--trainer.max_steps=1", "--trainer.callbacks=[]")
    elsewhere = tmp_path / "kept" / "step1.ckpt"
    elsewhere.parent.mkdir()
    shutil.copy(tmp_path / "logs" / "version_0" / "checkpoints" / "last.ckpt", elsewhere)
    capsys.readouterr()
    fit(tmp_path, "--trainer.max_steps=2", "--trainer.callbacks=[]", f"--ckpt_path={elsewhere}")
    out = capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["version_0", "version_1"]
    line = next(x for x in out.splitlines() if x.startswith("slca fit: run folder"))
    assert f"{tmp_path}/logs/version_1" in line
    assert f"resumed from {elsewhere}, which is not in <save_dir>/<name>/version_N/" in line
    assert "logging to a new folder" in line
    assert steps_with(rows(tmp_path / "logs" / "version_0" / "metrics.csv"), "train/loss") == [0]
    assert steps_with(rows(tmp_path / "logs" / "version_1" / "metrics.csv"), "train/loss") == [1]
