"""experiments/credit_assignment: the dose-response statistics on literal numbers, the reading
for each case, the default grid (70 runs, SLCA/GRPO pairs first) and ``--report-only`` on a
synthetic results folder of the whole grid (no training)."""

from __future__ import annotations

import csv
import json
import math
import re
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from experiments.credit_assignment import report, run  # noqa: E402
from experiments.credit_assignment.summary import (  # noqa: E402
    Estimate,
    slope_estimate,
    t975,
    warm_start_id,
)

E = Estimate
NAN = math.nan


# ----------------------------------------------------------------------------- statistics
def test_t_quantiles_from_the_table_and_beyond_it():
    assert t975(2) == 4.303 and t975(4) == 2.776 and t975(18) == 2.101 and t975(30) == 2.042
    assert t975(38) == pytest.approx(2.0244, abs=2e-4)  # a 40-run slope's degrees of freedom
    assert t975(100) == pytest.approx(1.9840, abs=2e-4)
    assert math.isnan(t975(0))


def test_slope_and_its_interval_on_literal_numbers():
    # x̄ = 1.5, ȳ = 2.75, Sxx = 5, Sxy = 5.5: slope 1.1; residuals -0.1, 0.8, -1.3, 0.6:
    # SSR = 2.7, s² = 2.7 / 2, se = sqrt(1.35 / 5); t(2) = 4.303
    e = slope_estimate([0, 1, 2, 3], [1, 3, 2, 5])
    half = 4.303 * math.sqrt(1.35 / 5)
    assert (e.value, e.lo, e.hi, e.n) == (
        pytest.approx(1.1),
        pytest.approx(1.1 - half),
        pytest.approx(1.1 + half),
        4,
    )
    assert slope_estimate([0, 1, 2, 3, 4], [1, 3, 2, 5, NAN]) == e  # a NaN run is left out
    two = slope_estimate([0, 2], [1.0, 0.0])
    assert two.value == pytest.approx(-0.5) and not two.has_interval  # no interval from 2
    assert math.isnan(slope_estimate([1, 1, 1], [0.0, 0.1, 0.2]).value)  # one σ: no slope
    exact = slope_estimate([0, 1, 2], [0.0, -0.5, -1.0])
    assert (exact.lo, exact.hi) == (pytest.approx(-0.5), pytest.approx(-0.5))
    assert e.text() == f"+1.100 [{1.1 - half:+.3f}, {1.1 + half:+.3f}]"


def _row(seed: int, gain: float, start: str = "aa") -> dict:
    return {"seed": seed, "warm_start": start, report.DOSE_KEY: gain}


def test_paired_difference_per_sigma_and_the_difference_of_slopes():
    slca = {0.0: [0.02, 0.03, 0.01], 1.0: [0.03, 0.02, 0.02], 2.0: [0.02, 0.04, 0.03]}
    grpo = {0.0: [0.02, 0.02, 0.01], 1.0: [0.00, 0.01, 0.00], 2.0: [-0.02, 0.00, -0.01]}
    groups = {}
    for n in slca:
        groups[(n, "slca")] = [_row(k, g) for k, g in enumerate(slca[n])]
        groups[(n, "grpo")] = [_row(k, g) for k, g in enumerate(grpo[n])]
    dr = report.dose_response(groups, ["grpo", "slca"])
    assert dr.noises == [0.0, 1.0, 2.0]
    # σ = 2: differences 0.04, 0.04, 0.04 → mean 0.04, no spread
    assert (dr.diffs[2.0].value, dr.diffs[2.0].lo, dr.diffs[2.0].n) == (
        pytest.approx(0.04),
        pytest.approx(0.04),
        3,
    )
    # σ = 0: differences 0, 0.01, 0 → mean 1/300, sd 0.01/sqrt(3), t(2) = 4.303
    half = 4.303 * (0.01 / math.sqrt(3)) / math.sqrt(3)
    assert dr.diffs[0.0].lo == pytest.approx(0.01 / 3 - half)
    assert dr.diffs[0.0].hi == pytest.approx(0.01 / 3 + half)
    # every pair present: the slope of the differences is the difference of the slopes
    assert dr.diff_slope.value == pytest.approx(dr.slopes["slca"].value - dr.slopes["grpo"].value)
    assert dr.diff_slope.n == 9 and dr.slopes["grpo"].n == 9
    assert dr.cells[("grpo", 1.0)].value == pytest.approx(0.01 / 3)
    # a pair from other warm-start weights is not a pair
    groups[(2.0, "grpo")][0]["warm_start"] = "bb"
    assert report.dose_response(groups, ["grpo", "slca"]).diffs[2.0].n == 2


def test_a_shipped_warm_start_is_one_start_on_every_machine():
    """The cache folder's digest covers a marker file that records the checkout's path, so the
    same shipped weights give each machine its own ``model_sha256``: the id is the weights
    file's sha256 from the folder's name."""
    folder = "/root/.cache/slca/suite-pooled-sft-shipped-1b9da5924b9a50d1"
    a = {"model_folder": folder, "model_sha256": "fa37759c8dda" + "0" * 52}
    b = {"model_folder": folder.replace("/root", "/home/x"), "model_sha256": "8b421ef6a0f4"}
    assert warm_start_id(a) == warm_start_id(b) == "1b9da5924b"
    rebuilt = {"model_folder": "/c/suite-sft-0123456789abcdef", "model_sha256": "7a2c0a2822ff"}
    assert warm_start_id(rebuilt) == "7a2c0a2822"  # a warm start trained here: its digest
    assert warm_start_id({"model_folder": None, "model_sha256": None}) is None


# ----------------------------------------------------------------------------- the reading
DIFFS = {
    0.0: E(0.000, -0.010, 0.010, 5),
    0.5: E(0.005, -0.002, 0.012, 5),
    1.0: E(0.020, 0.005, 0.035, 5),
    2.0: E(0.040, 0.020, 0.060, 5),
}


def _reading(grpo, slca, diff, diffs=DIFFS) -> str:
    return "\n".join(report.dose_response_reading({"grpo": grpo, "slca": slca}, diff, diffs))


def test_reading_when_grpo_falls_and_slca_does_not_from_sigma_1():
    text = _reading(
        E(-0.02, -0.03, -0.01, 20), E(0.001, -0.005, 0.007, 20), E(0.021, 0.01, 0.032, 20)
    )
    assert text.startswith(
        "- **As the mechanism predicts, GRPO's gain falls as σ grows (-0.020 per unit σ, 95 % CI "
        "[-0.030, -0.010], 20 runs) and SLCA's does not (+0.001 per unit σ, 95 % CI [-0.005, "
        "+0.007], 20 runs)**; difference of slopes SLCA − GRPO +0.021 per unit σ, 95 % CI "
        "[+0.010, +0.032], 20 pairs."
    )
    assert (
        "- The SLCA − GRPO difference in gain (paired by seed) excludes 0 from σ = 1 on: "
        "+0.020 [+0.005, +0.035] at σ = 1 (+1.3 tasks of 64, 5 pairs); +0.040 [+0.020, +0.060] "
        "at σ = 2 (+2.6 tasks of 64, 5 pairs)." in text
    )
    assert "do not show" not in text


def test_reading_when_it_holds_but_no_single_sigma_separates_the_methods():
    diffs = {n: E(0.01, -0.01, 0.03, 5) for n in (0.0, 0.5, 1.0, 2.0)}
    text = _reading(
        E(-0.02, -0.03, -0.01, 20), E(0.0, -0.01, 0.01, 20), E(0.02, 0.005, 0.035, 20), diffs
    )
    assert "As the mechanism predicts" in text
    assert "- At no σ does the SLCA − GRPO difference in gain (paired by seed) exclude 0: " in text


def test_reading_names_sigma_levels_that_separate_only_without_their_larger_neighbours():
    diffs = {**DIFFS, 2.0: E(0.02, -0.01, 0.05, 5)}
    text = _reading(
        E(-0.02, -0.03, -0.01, 20), E(0.0, -0.01, 0.01, 20), E(0.02, 0.005, 0.035, 20), diffs
    )
    assert "excludes 0 at σ = 1 but not at every larger σ" in text


def test_reading_says_plainly_when_the_data_do_not_show_it():
    text = _reading(E(-0.01, -0.03, 0.01, 20), E(0.0, -0.02, 0.02, 20), E(0.01, -0.01, 0.03, 20))
    assert text.startswith("- **The data do not show the predicted pattern** (GRPO's gain")
    assert "GRPO's gain does not fall detectably as σ grows (-0.010 per unit σ" in text
    assert "the slopes do not differ detectably (difference of slopes" in text
    assert "(the two slopes' intervals overlap)" in text
    assert "As the mechanism predicts" not in text


def test_reading_when_grpo_falls_and_slca_does_not_but_the_slopes_do_not_differ():
    text = _reading(
        E(-0.02, -0.035, -0.005, 20), E(-0.005, -0.02, 0.01, 20), E(0.015, -0.005, 0.035, 20)
    )
    assert "**The data do not show the predicted pattern**" in text
    assert "GRPO's gain falls as σ grows (-0.020" in text
    assert "SLCA's slope is -0.005 per unit σ" in text
    assert "the slopes do not differ detectably" in text


def test_reading_when_both_fall_slca_less_steeply():
    text = _reading(
        E(-0.04, -0.05, -0.03, 20), E(-0.01, -0.018, -0.002, 20), E(0.03, 0.02, 0.04, 20)
    )
    assert text.startswith("- **Only in part as predicted: GRPO's gain falls as σ grows")
    assert "and SLCA's falls too (-0.010 per unit σ" in text


def test_reading_when_slca_falls_more_steeply():
    below = {**DIFFS, 2.0: E(-0.03, -0.05, -0.01, 5)}
    text = _reading(
        E(-0.01, -0.02, -0.001, 20), E(-0.04, -0.05, -0.03, 20), E(-0.03, -0.04, -0.02, 20), below
    )
    assert "**The data do not show the predicted pattern**" in text
    assert "SLCA's falls too" in text and "SLCA's slope is the lower one" in text
    assert "- SLCA's gain is below GRPO's (interval below 0) at σ = 2." in text


def test_reading_without_enough_runs_says_so():
    text = _reading(E(-0.02, NAN, NAN, 2), E(0.0, -0.01, 0.01, 8), report.NO_ESTIMATE, {})
    assert text.startswith("- **Not enough runs for a dose-response reading**")
    assert "(GRPO: 2 runs, SLCA: 8)" in text


# ----------------------------------------------------------------------------- the grid
def test_the_default_grid_is_the_70_runs_slca_grpo_pairs_first_seed_by_seed():
    jobs = run.jobs_for(run.parse([]))
    cells = [(j.seed, j.noise, j.method) for j in jobs]
    pairs = [(k, n, m) for k in range(5) for n in (0, 0.5, 1, 2) for m in ("slca", "grpo")]
    others = [(k, n, m) for k in range(5) for n in (0, 0.5) for m in ("toolpo", "rltr", "mtgrpo")]
    assert cells == pairs + others and len(cells) == 70 and len(set(cells)) == 70
    assert cells[:8] == [(0, n, m) for n in (0, 0.5, 1, 2) for m in ("slca", "grpo")]  # a curve
    assert {(j.steps, j.eval_every, j.eval_tasks) for j in jobs} == {(40, 10, 64)}
    assert jobs[0].folder == str(run.HERE / "results_shipped" / "noise0" / "slca" / "seed0")
    assert run.parse([]).out == str(run.HERE / "REPORT.md")


def test_methods_noise_and_seeds_keep_cells_of_the_design_and_grid_is_the_full_cross():
    only = run.jobs_for(run.parse(["--methods", "grpo", "rltr", "--noise", "1", "0.5"]))
    assert [(j.seed, j.noise, j.method) for j in only][:3] == [
        (0, 0.5, "grpo"), (0, 1.0, "grpo"), (1, 0.5, "grpo"),
    ]  # fmt: skip
    assert len(only) == 5 * 2 + 5  # GRPO at 0.5 and 1, RLTR at 0.5 (the design has no RLTR at 1)
    assert len(run.jobs_for(run.parse(["--quick"]))) == 14  # seed 0 of the design
    grid = run.jobs_for(run.parse(["--design", "grid", "--seeds", "0"]))
    assert [(j.noise, j.method) for j in grid] == [
        (n, m) for n in (0.0, 0.5) for m in ("grpo", "slca", "toolpo", "rltr", "mtgrpo")
    ]
    with pytest.raises(SystemExit):
        run.main(["--noise", "3", "--report-only", "--runs", "/nonexistent"])


def test_finished_runs_from_the_same_shipped_weights_on_other_machines_are_one_start(tmp_path):
    jobs = []
    for seed, digest in ((0, "fa37759c8dda"), (1, "8b421ef6a0f4")):
        job = run.Job("slca", 0.0, seed, 40, 10, 64, str(tmp_path / f"seed{seed}"))
        logs = Path(job.folder) / "logs" / "version_0"
        logs.mkdir(parents=True)
        (logs / "metrics.csv").write_text("step\n0\n")
        (Path(job.folder) / "run.json").write_text(json.dumps({**asdict(job), "error": None}))
        folder = f"/m{seed}/.cache/suite-pooled-sft-shipped-1b9da5924b9a50d1"
        prov = {"model_folder": folder, "model_sha256": digest + "0" * 52}
        (logs / "provenance.json").write_text(json.dumps(prov))
        jobs.append(job)
    assert run.other_starts(jobs, "1b9da5924b") == {}
    assert run.other_starts(jobs, "0d81c2b38c" + "0" * 54) == {
        "1b9da5924b": [jobs[0].folder, jobs[1].folder]
    }


# ----------------------------------------------------------------------------- --report-only
SHIPPED = "/root/.cache/slca_lightning/suite-pooled-sft-shipped-1b9da5924b9a50d1"
NOISE = (0.0, 0.004, -0.004, 0.002, -0.002)


def _fake_run(job: run.Job, gain: float) -> None:
    """A finished run's committed files: run.json, provenance.json and a metrics.csv with
    held-out evaluations at steps 0 and 40 and six training steps."""
    folder = Path(job.folder)
    logs = folder / "logs" / "version_0"
    logs.mkdir(parents=True)
    (folder / "run.json").write_text(
        json.dumps({**asdict(job), "seconds": 300.0, "error": None, "gold_calls_per_episode": 1.31})
    )
    digest = f"{job.seed:02d}" * 32  # each seed ran on another machine: another folder digest
    (logs / "provenance.json").write_text(
        json.dumps({"model_folder": SHIPPED, "model_sha256": digest})
    )
    leak = 0.0 if job.method in ("slca", "rltr") else 0.5 + job.noise
    keys = ["step", "reward/tool", "reward/tool_std", "reward/summary", "reward/summary_std",
            "reward/total", "reward/total_std", "reward/action_std", "reward/rltr_std",
            "adv/summary_leakage", "adv/contamination", "rollout/tool_calls_per_episode"]  # fmt: skip
    evals = ["tool_accuracy", "process", "success@0.9", "name_f1", "arg_match",
             "tool_calls_per_episode", "tool_call_validity"]  # fmt: skip
    keys += [f"eval/in_domain/{k}" for k in evals]
    with open(logs / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, keys)
        w.writeheader()
        for step, acc in ((0, 0.1875), (40, 0.1875 + gain)):
            w.writerow({"step": step, **{f"eval/in_domain/{k}": 0.8 for k in evals},
                        "eval/in_domain/tool_accuracy": acc})  # fmt: skip
        for step in range(1, 7):
            w.writerow({"step": step, "reward/tool": 0.5, "reward/tool_std": 0.1,
                        "reward/summary": 0.4, "reward/summary_std": 0.1 + 0.1 * job.noise,
                        "reward/total": 0.9,
                        "reward/total_std": 0.1, "reward/action_std": 0.1, "reward/rltr_std": 0.1,
                        "adv/summary_leakage": leak, "adv/contamination": leak / 2,
                        "rollout/tool_calls_per_episode": 1.2})  # fmt: skip


def _study(tmp_path: Path, gain) -> str:
    runs = tmp_path / "runs"
    for job in run.jobs_for(run.parse(["--runs", str(runs)])):
        _fake_run(job, gain(job))
    out = tmp_path / "REPORT.md"
    assert run.main(["--report-only", "--runs", str(runs), "--out", str(out)]) == 0
    return out.read_text()


def test_report_only_builds_the_report_and_plot_from_the_dose_response_grid(tmp_path):
    def gain(job):  # GRPO loses 0.02 per unit σ, SLCA keeps its gain, RLTR ignores the judge
        k = job.seed
        if job.method == "grpo":
            return 0.05 - 0.02 * job.noise + NOISE[k]
        if job.method == "rltr":
            return 0.01 + NOISE[k]
        return 0.05 + NOISE[(k + 2) % 5]

    text = _study(tmp_path, gain)
    assert (
        "70 runs of the design's 70 (seeds 0, 1, 2, 3, 4: GRPO and SLCA-GRPO at σ ∈ {0, 0.5, "
        in text
    )
    assert "; ToolPO, RLTR and MT-GRPO at σ ∈ {0, 0.5}), 40 steps each" in text
    assert "## Dose-response: gain in held-out strict tool accuracy against summary noise σ" in text
    assert "| GRPO | +0.050 [" in text and "| SLCA-GRPO | +0.050 [" in text
    assert "- **As the mechanism predicts, GRPO's gain falls as σ grows (-0.020 per unit σ" in text
    assert re.search(r"SLCA's does not \([+-]0\.000 per unit σ", text)
    assert "difference of slopes SLCA − GRPO +0.020 per unit σ" in text
    assert "excludes 0 from σ = 0.5 on: +0.010 [" in text
    assert "at σ = 2 (+2.6 tasks of 64, 5 pairs)." in text
    # one shipped start although each machine's folder digest differs: every pair is kept
    assert "Every run began from the same weights (`1b9da5924b`" in text
    assert "RLTR reads ['rltr'], never the judge: its runs of each seed are identical" in text
    for name in ("dose_response", "noise0", "noise0.5", "noise1", "noise2"):
        png = tmp_path / f"report_{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    for noise in ("0", "0.5", "1", "2"):
        assert f"## Judge noise σ = {noise}" in text
    assert "## SLCA − GRPO, paired by seed" in text and "| summary leakage |" in text
    # the dose each σ delivers: the summary reward's spread across a step's rollouts
    assert "| 0 | 25 | 0.100 ± 0.000 | 0.100 ± 0.000 | 1.00 ± 0.00 |" in text
    assert "| 2 | 10 | 0.300 ± 0.000 | 0.100 ± 0.000 | 3.00 ± 0.00 |" in text


def test_report_only_says_plainly_when_the_grid_does_not_show_it(tmp_path):
    text = _study(tmp_path, lambda job: 0.03 + NOISE[job.seed] + NOISE[(job.seed + 1) % 5])
    assert "- **The data do not show the predicted pattern**" in text
    assert re.search(
        r"GRPO's gain does not fall detectably as σ grows \([+-]0\.000 per unit σ", text
    )
    assert "- At no σ does the SLCA − GRPO difference in gain (paired by seed) exclude 0" in text


def test_report_of_a_study_not_run_yet(tmp_path):
    out = tmp_path / "REPORT.md"
    assert run.main(["--report-only", "--runs", str(tmp_path / "none"), "--out", str(out)]) == 0
    text = out.read_text()
    assert "0 runs of the design's 70" in text and "No run of the study has finished yet" in text
    assert not (tmp_path / "report_dose_response.png").exists()


def test_a_warm_start_the_checkout_does_not_ship_stops_the_study(monkeypatch):
    """Trained here, it would not be the bytes the other machines' runs began from."""
    from slca_lightning.models import shipped

    monkeypatch.setattr(shipped, "is_shipped", lambda name: False)
    with pytest.raises(SystemExit, match="suite-pooled-sft is not shipped in this checkout"):
        run.start_of("suite-pooled-sft", allow_unshipped=False)
    assert run.start_of("tiny", allow_unshipped=False) is None  # a random model: no start
    assert run.study_model(run.parse([])) == "suite-pooled-sft"
    assert run.study_model(run.parse(["--quick"])) == "tiny"


def test_quick_never_writes_the_studys_own_folders():
    args = run.parse(["--quick", "--out", "/tmp/x.md"])
    assert args.runs == "/tmp/x_runs"
    here = str(run.HERE)
    default = run.parse(["--quick"])
    assert not default.out.startswith(here) and not default.runs.startswith(here)
    assert run.parse(["--quick", "--runs", "/tmp/r"]).runs == "/tmp/r"


def test_report_only_says_a_resumed_commands_wall_time_covers_its_own_runs(tmp_path):
    """A study resumed by a later command: study.json records that command's wall time and how
    many runs it ran and kept, and the rebuilt report does not pass that time off as the
    whole study's."""
    runs = tmp_path / "runs"
    for job in run.jobs_for(run.parse(["--runs", str(runs)])):
        _fake_run(job, 0.05)
    (runs / "study.json").write_text(json.dumps(
        {"command": "python experiments/credit_assignment/run.py --workers 1", "wall_seconds": 600.0,
         "ran": 10, "kept": 60}
    ))  # fmt: skip
    out = tmp_path / "REPORT.md"
    assert run.main(["--report-only", "--runs", str(runs), "--out", str(out)]) == 0
    text = out.read_text()
    assert (
        "Command: `python experiments/credit_assignment/run.py --workers 1`; this report rebuilt"
        in text
    )
    assert (
        "; wall time 10.0 min for the 10 runs this command ran (60 had finished before and were kept)."
        in text
    )
