"""The credit-assignment study (``experiments/credit_assignment``) in its ``--quick`` form.

Runs the real command in a subprocess: seed 0 of the dose-response design (SLCA and GRPO at
σ ∈ {0, 0.5, 1, 2}, ToolPO, RLTR and MT-GRPO at σ ∈ {0, 0.5}: 14 runs), 2 steps each, on the
random ``tiny`` model with tiny shapes (real CLI fits, agent loop, simulator, HierR with the
noisy judge, routers, held-out evaluations). Its figures mean nothing; what it checks is
that every run trains, the report has every table and plot, and that the runs of one seed
and noise level differ only in the router (matched budgets).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "experiments" / "credit_assignment"
sys.path.insert(0, str(STUDY))

import report  # noqa: E402
import run as study  # noqa: E402


def _flat(tree, prefix=""):
    out = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and k != "router":
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def test_overlays_differ_only_in_the_router_for_one_seed_and_noise():
    args = study.parse(["--runs", "/tmp/x"])
    jobs = [j for j in study.jobs_for(args) if j.seed == 0 and j.noise == 0.5]
    assert sorted(j.method for j in jobs) == sorted(study.METHODS)
    flats = [_flat(study.overlay(j)) for j in jobs]
    for flat in flats[1:]:
        differ = {k for k in flat if flat[k] != flats[0][k]}
        assert differ <= {"model.router", "trainer.default_root_dir", "trainer.logger"}, differ
        assert "model.router" in differ


def test_base_config_builds_through_the_cli(tmp_path):
    from slca_lightning.cli.commands import main

    cli = main(
        ["--config", str(STUDY / "base.yaml"), "--model.model=tiny", "--trainer.logger=false"],
        run=False,
    )
    judge = cli.model.reward_head.judge
    assert type(judge).__name__ == "NoisyJudge" and judge.judge.grounding_weight == 0.0
    (evaluator,) = [c for c in cli.trainer.callbacks if type(c).__name__ == "InDomainEval"]
    clean = evaluator.reward_head.judge  # held-out episodes are scored without the noise
    assert type(clean).__name__ == "RuleJudge" and clean.grounding_weight == 0.0
    assert {c.name for c in cli.model.reward_head.extra_channels} >= {"action", "rltr"}


def test_set_option_parses_yaml_values():
    args = study.parse(["--set", "model.learning_rate=1e-4", "--set", "data.group_size=8"])
    assert args.overrides == {"model.learning_rate": 1e-4, "data.group_size": 8}
    with pytest.raises(SystemExit):
        study.parse(["--set", "no-equals-sign"])


def test_paired_differences_and_the_reading_on_literal_runs():
    a = [{"seed": 0, "k": 0.5}, {"seed": 1, "k": 0.7}, {"seed": 2, "k": float("nan")}]
    b = [{"seed": 0, "k": 0.25}, {"seed": 1, "k": 0.5}, {"seed": 2, "k": 0.1}]
    assert report.paired(a, b, "k") == [0.25, pytest.approx(0.2)]
    assert report.pm([0.25, 0.2]) == "0.225 ± 0.035"
    assert report.pm([float("nan")]) == "–"


def test_pairs_need_the_same_warm_start_and_intervals_are_t_intervals():
    a = [{"seed": 0, "k": 0.5, "warm_start": "aa"}, {"seed": 1, "k": 0.7, "warm_start": "bb"}]
    b = [{"seed": 0, "k": 0.25, "warm_start": "aa"}, {"seed": 1, "k": 0.5, "warm_start": "cc"}]
    assert report.paired(a, b, "k") == [0.25]  # seed 1 began from other weights
    lo, hi = report.ci95([0.0, 0.1, 0.2])  # mean 0.1, sd 0.1, t(2) = 4.303
    assert (lo, hi) == (
        pytest.approx(0.1 - 4.303 * 0.1 / 3**0.5),
        pytest.approx(0.1 + 4.303 * 0.1 / 3**0.5),
    )
    assert report.ci95([0.3]) is None
    assert report.min_detectable([0.0, 0.1, 0.2]) == pytest.approx(2.8 * 0.1 / 3**0.5)


def test_a_runs_leakage_is_the_median_over_steps_and_contamination_the_mean():
    """One step whose tool credit was ~0 logged a leakage of 5e4 (ToolPO, σ = 0.5, seed 2):
    it must not swamp the run's figure."""
    from experiments.credit_assignment.summary import run_summary

    steps = [(1, 0.9, 0.1), (2, 1.1, 0.2), (3, 50014.2, 0.6)]
    run = {
        "train": {s: {"adv/summary_leakage": leak, "adv/contamination": c} for s, leak, c in steps},
        "eval": {},
    }
    out = run_summary(run, target=0.42)
    assert out["leakage"] == 1.1
    assert out["contamination"] == pytest.approx(0.3)


def test_quick_study_writes_every_table_and_plot(tmp_path):
    out = tmp_path / "REPORT.md"
    proc = subprocess.run(
        [sys.executable, str(STUDY / "run.py"), "--quick", "--out", str(out),
         "--runs", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=420, check=False, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = out.read_text()
    assert "Command: `python experiments/credit_assignment/run.py --quick" in text
    assert (
        "14 runs of the design's 14 (seeds 0: GRPO and SLCA-GRPO at σ ∈ {0, 0.5, 1, 2}; "
        "ToolPO, RLTR and MT-GRPO at σ ∈ {0, 0.5}), 2 steps each" in text
    )
    for noise in ("0", "0.5", "1", "2"):
        assert f"## Judge noise σ = {noise}" in text
        png = tmp_path / f"report_noise{noise}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "## Dose-response" in text
    assert (tmp_path / "report_dose_response.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for label in ("GRPO", "SLCA-GRPO"):  # the dose-response table, 4 method and 4 drift tables
        assert text.count(f"| {label} |") == 9
    for label in ("ToolPO", "RLTR", "MT-GRPO"):  # the dose-response table, 2 + 2
        assert text.count(f"| {label} |") == 5
    assert "## SLCA − GRPO, paired by seed" in text and "## Reading" in text
    assert "## Warm starts" in text
    # RLTR never reads the judge and the evaluations use the noise-free one: its runs of a
    # seed must be the same at both noise levels
    assert "RLTR reads ['rltr'], never the judge: its runs of each seed are identical" in text
    for run_json in (tmp_path / "runs").rglob("run.json"):
        meta = json.loads(run_json.read_text())
        assert meta["error"] is None and meta["gold_calls_per_episode"] > 0
        overlay = yaml.safe_load((run_json.parent / "overlay.yaml").read_text())
        assert overlay["model"]["router"]["class_path"] == study.METHODS[meta["method"]]
        metrics = (run_json.parent / "logs" / "version_0" / "metrics.csv").read_text()
        assert "eval/in_domain/tool_accuracy" in metrics and "reward/total" in metrics


def test_a_resumed_study_keeps_finished_runs_and_redoes_failed_or_changed_ones(tmp_path):
    from dataclasses import asdict, replace

    job = study.Job("slca", 0.0, 0, 30, 10, 64, str(tmp_path / "seed0"))
    assert not study.finished(job)  # nothing there yet
    folder = Path(job.folder)
    (folder / "logs" / "version_0").mkdir(parents=True)
    (folder / "logs" / "version_0" / "metrics.csv").write_text("step\n0\n")
    (folder / "run.json").write_text(json.dumps({**asdict(job), "error": None}))
    assert study.finished(job)
    assert not study.finished(replace(job, steps=40))  # other settings: run it again
    moved = {**asdict(job), "folder": "/elsewhere/results/seed0", "error": None}
    (folder / "run.json").write_text(json.dumps(moved))
    assert study.finished(job)  # written by a checkout at another path: still finished
    (folder / "run.json").write_text(json.dumps({**asdict(job), "error": "boom"}))
    assert not study.finished(job)


def test_finished_runs_from_other_warm_start_weights_are_named(tmp_path):
    """A study resumed on a machine whose rebuilt warm start has other weights would pair
    new runs with old ones from another start: ``other_starts`` finds them (run.py then
    stops unless --mixed-starts)."""
    from dataclasses import asdict

    jobs = []
    for seed, sha in ((0, "aaaa"), (1, "bbbb"), (2, None)):
        job = study.Job("slca", 0.0, seed, 30, 10, 64, str(tmp_path / f"seed{seed}"))
        logs = Path(job.folder) / "logs" / "version_0"
        logs.mkdir(parents=True)
        (logs / "metrics.csv").write_text("step\n0\n")
        (Path(job.folder) / "run.json").write_text(json.dumps({**asdict(job), "error": None}))
        if sha:
            (logs / "provenance.json").write_text(json.dumps({"model_sha256": sha + "0" * 60}))
        jobs.append(job)
    jobs.append(study.Job("grpo", 0.0, 0, 30, 10, 64, str(tmp_path / "not_run")))
    assert study.other_starts(jobs, "aaaa" + "0" * 60) == {"bbbb000000": [jobs[1].folder]}
    assert study.other_starts(jobs, "bbbb" + "0" * 60) == {"aaaa000000": [jobs[0].folder]}


def test_reading_makes_no_power_claim_when_every_pair_is_equal():
    """Three seeds whose SLCA and GRPO gains are all equal: a zero spread gives a
    'minimum detectable difference' of 0, which would read as infinite power."""

    def run(seed, gain):
        keys = ("mean_process", "final/process", "final/tool_accuracy", "final/name_f1")
        keys += ("leakage", "train_calls/late")
        return {"seed": seed, "warm_start": "aa", "gain/tool_accuracy": gain} | dict.fromkeys(
            keys, 0.5
        )

    groups = {
        (0.0, "slca"): [run(s, 0.016) for s in range(3)],
        (0.0, "grpo"): [run(s, 0.016) for s in range(3)],
    }
    text = "\n".join(report.reading(groups, [0.0]))
    assert "all 3 pairs differ by exactly +0.000; more seeds are needed" in text
    assert "only differences above 0.000" not in text
