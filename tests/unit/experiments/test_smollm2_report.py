"""experiments/smollm2/README.md's smoke block is the committed run's REPORT.md table (written by
``python experiments/smollm2/run.py --embed experiments/smollm2/README.md``), never typed in."""

from pathlib import Path

from experiments.smollm2.run import BEGIN, END, readme_block

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "experiments" / "smollm2" / "results" / "smoke"


def test_readme_block_is_the_committed_report():
    text = (ROOT / "experiments" / "smollm2" / "README.md").read_text()
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert block.strip() == readme_block(RESULTS).strip()
    assert "| SFT + SLCA-GRPO" in block


def _args(**kw):
    import argparse

    base = dict(
        model="m",
        sft_steps=30,
        rl_steps=16,
        prompts=4,
        seed=1,
        threads=1,
        eval_tasks=64,
        bfcl=16,
        bfcl_categories="simple_python,irrelevance",
        rl_lr=None,
        pooled=0.0,
        sft_from=None,
        rl_overlay=None,
        control=False,
    )
    return argparse.Namespace(**{**base, **kw})


def test_report_has_the_bfcl_table_before_and_after_rl(tmp_path):
    from experiments.smollm2.run import report

    row = {"tool_accuracy": 0.5, "success@0.9": 0.25}
    stages = {
        "base": {"metrics": {"tool_accuracy": 0.1}, "wall_s": 60, "peak_rss_gb": 4.0},
        "sft": {"wall_s": 600, "peak_rss_gb": 6.0},
        "rl": {
            "evals": {"sft": row, "sft+rl": {**row, "tool_accuracy": 0.625}},
            "wall_s": 1200,
            "peak_rss_gb": 7.0,
            "step_seconds": [200.0, 210.0],
        },
        "bfcl_sft": {"metrics": {"overall_accuracy": 0.25, "simple_python": 0.5}},
        "bfcl_rl": {"metrics": {"overall_accuracy": 0.375, "simple_python": 0.5}},
    }
    text = report(tmp_path, stages, _args())
    assert "| SFT + SLCA-GRPO (16 steps) | 0.625 | 0.250 |" in text
    assert "| overall_accuracy | 0.250 | 0.375 |" in text
    assert "RL step time: 200 s, 210 s." in text
    assert (tmp_path / "REPORT.md").read_text() == text


def test_sft_from_copies_finished_stages_and_finds_the_last_checkpoint(tmp_path):
    import os

    import pytest

    from experiments.smollm2.run import _copy_stage, _last_checkpoint

    src, out = tmp_path / "a", tmp_path / "b"
    (src / "sft").mkdir(parents=True)
    (src / "sft" / "result.json").write_text('{"wall_s": 1}')
    _copy_stage(src, out, "sft")
    _copy_stage(src, out, "bfcl_sft")  # not finished there: nothing copied
    assert (out / "sft" / "result.json").read_text() == '{"wall_s": 1}'
    assert not (out / "bfcl_sft").exists()
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        _last_checkpoint(out)
    (out / "rl" / "ck").mkdir(parents=True)
    for name, mtime in (("new.ckpt", 2000), ("old.ckpt", 1000)):
        (out / "rl" / "ck" / name).write_text("")
        os.utime(out / "rl" / "ck" / name, (mtime, mtime))
    assert _last_checkpoint(out / "rl").name == "new.ckpt"


def test_report_command_names_every_option_that_shaped_the_run(tmp_path):
    """The REPORT's command line reruns the run: the optional flags appear where they were set
    (a report that dropped --rl-overlay would describe another run)."""
    from experiments.smollm2.run import ROOT as RUN_ROOT
    from experiments.smollm2.run import command

    out = RUN_ROOT / "experiments" / "smollm2" / "results" / "x"
    plain = command(out, _args(bfcl=0))
    assert plain == (
        "python experiments/smollm2/run.py --model m --out experiments/smollm2/results/x "
        "--sft-steps 30 --rl-steps 16 --prompts 4 --seed 1 --threads 1 --eval-tasks 64"
    )
    full = command(out, _args(rl_lr=1e-5, pooled=0.5, sft_from=str(out.parent / "y"),
                              rl_overlay="configs/overlays/stop_decision.yaml", control=True))  # fmt: skip
    assert full == plain + (
        " --rl-lr 1e-05 --pooled 0.5 --sft-from experiments/smollm2/results/y"
        " --rl-overlay configs/overlays/stop_decision.yaml --control"
        " --bfcl 16 --bfcl-categories simple_python,irrelevance"
    )
    assert command(tmp_path, _args(bfcl=0)).split(" --out ")[1].startswith(str(tmp_path))
