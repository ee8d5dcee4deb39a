"""experiments/learning: the report is rendered from the runs' result.json files alone, and a
finished run is never redone."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from experiments.learning import report, run  # noqa: E402  (packages: no clash with other report.py)


def _metrics(acc: float, succ: float) -> dict:
    return {"tool_accuracy": acc, "success@0.9": succ, "name_f1": 0.9, "arg_match": 0.5,
            "process": 0.8, "tool_calls_per_episode": 1.2, "reference/summary": 0.4}  # fmt: skip


def _write(folder: Path, data: dict) -> None:
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps(data))


def test_report_gathers_gains_and_control_from_result_files(tmp_path):
    prov = {"threads": 1, "load_average": [0.5, 0.4, 0.3]}
    _write(tmp_path / "rl_seed0", {
        "name": "rl_seed0", "seed": 0, "router": "slca_lightning.advantages.SLCARouter",
        "wall_s": 500.0, "rl_seconds": 300.0, "peak_rss_gb": 1.5, "steps": 30,
        "reward_first10": 1.0, "reward_last10": 1.2, "before": _metrics(0.25, 0.10),
        "after": _metrics(0.40, 0.20), "before_step": 0, "after_step": 30, "provenance": prov,
    })  # fmt: skip
    _write(tmp_path / "control_seed0", {
        "seed": 0, "sft_steps": 400, "seconds_trained": 300.0, "metrics": _metrics(0.30, 0.125),
    })  # fmt: skip
    text = report.render(tmp_path, ROOT)
    assert "| seed 0 SLCARouter | +0.150 | +6 | +0.200 | +0.050 |" in text
    assert "control: 400 more SFT steps (300 s)" in text
    assert "| after 30 RL steps | 0.400 | 0.200 |" in text


def _rl_seed0(folder: Path) -> None:
    _write(folder / "rl_seed0", {
        "name": "rl_seed0", "seed": 0, "router": "slca_lightning.advantages.SLCARouter",
        "wall_s": 500.0, "rl_seconds": 300.0, "peak_rss_gb": 1.5, "steps": 40,
        "reward_first10": 1.0, "reward_last10": 1.2, "before": _metrics(0.25, 0.10),
        "after": _metrics(0.40, 0.20), "before_step": 0, "after_step": 40,
        "provenance": {"threads": 1, "load_average": [0.5, 0.4, 0.3]},
    })  # fmt: skip


def test_report_builds_without_the_transcript_files_and_says_so(tmp_path):
    """The saved episodes are not committed: the report keeps every table and says, in
    place of the transcripts, that they are not kept and how a rerun regenerates them."""
    _rl_seed0(tmp_path / "runs")
    text = report.render(tmp_path / "runs", tmp_path)
    assert "| after 40 RL steps | 0.400 | 0.200 |" in text
    assert "| seed 0 SLCARouter | +0.150 | +6 | +0.200 | – |" in text
    assert "## Held-out transcripts (rl_seed0)" in text
    assert "Transcripts are not kept in the repository." in text
    assert (
        "`runs/rl_seed0/logs/version_0/in_domain_episodes/step_0.jsonl` and `step_40.jsonl`" in text
    )
    assert "python experiments/learning/run.py" in text
    assert "[assistant]" not in text  # nothing made up


def test_report_shows_the_transcripts_when_the_episodes_are_there(tmp_path):
    _rl_seed0(tmp_path)
    episodes = tmp_path / "rl_seed0" / "logs" / "version_0" / "in_domain_episodes"
    episodes.mkdir(parents=True)
    gold = [[["add", {"a": 2, "b": 3}]]]
    for step, exact, turn in (
        (0, False, "<tool_call>?</tool_call>"),
        (40, True, "<tool_call>!</tool_call>"),
    ):
        rows = [
            {"task_id": "t0", "kind": "single", "question": "2+3?", "gold": gold, "exact": exact,
             "rewards": {"tool": float(exact), "summary": 0.5}, "turns": [turn, "5"],
             "observations": [["5"]]},
            {"task_id": "t1", "kind": "irrelevant", "question": "Hi?", "gold": [], "exact": True,
             "rewards": {"tool": 1.0, "summary": 0.5}, "turns": ["No tool."], "observations": []},
        ]  # fmt: skip
        (episodes / f"step_{step}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    text = report.render(tmp_path, tmp_path)
    assert "not kept in the repository" not in text
    assert "**t0** (single): 2+3?  " in text and "**t1** (irrelevant): Hi?  " in text
    assert "[assistant] <tool_call>!</tool_call>" in text and "[tool] 5" in text


def test_report_only_rebuilds_from_result_files_and_runs_nothing(tmp_path, monkeypatch):
    _rl_seed0(tmp_path / "runs")

    def boom(*a, **k):
        raise AssertionError("--report-only started a run")

    monkeypatch.setattr(run, "child", boom)
    out = tmp_path / "REPORT.md"
    assert run.main(["--report-only", "--runs", str(tmp_path / "runs"), "--out", str(out)]) == 0
    assert out.read_text() == report.render(tmp_path / "runs", ROOT)
    # nothing written into the runs folder (no merged config, no run)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["rl_seed0"]


def test_committed_reports_are_the_rebuilt_tables():
    """Each REPORT is ``run.py --report-only`` of its committed runs: every table and figure
    the same (the transcripts, whose episodes are not committed, aside)."""
    results = ROOT / "experiments" / "learning" / "results"
    reports = (
        (results / "quickstart", "REPORT.md"),  # the shipped pooled warm start
        (results / "quickstart_clean", "REPORT_clean.md"),  # the shipped clean warm start
        (results / "staleness0", "REPORT_staleness0.md"),  # synchronous, no control
        (results / "staleness1", "REPORT_staleness1.md"),  # asynchronous rollouts
        (results, "REPORT_suite_sft_600.md"),  # archived: the 600-step warm starts
        (results / "pooled", "REPORT_pooled.md"),
    )
    for runs, name in reports:
        committed = (ROOT / "experiments" / "learning" / name).read_text()
        rebuilt = report.render(runs, ROOT)
        cut = "## Held-out transcripts"
        assert rebuilt.split(cut)[0] == committed.split(cut)[0], name
        assert cut in rebuilt and cut in committed


def test_a_finished_run_is_not_redone(tmp_path, monkeypatch):
    done = {"name": "rl_seed3", "seed": 3}
    _write(tmp_path / "rl_seed3", done)

    def boom(*a, **k):
        raise AssertionError("a finished run was started again")

    monkeypatch.setattr(run, "child", boom)
    args = type("A", (), {"router": None, "threads": 1})()
    assert run.rl_run(3, args, tmp_path) == done


def test_readme_shows_exactly_the_committed_learning_figures():
    """The README's learning block is regenerated from experiments/learning/results by
    ``run.py --embed README.md``; a hand edit or a stale block fails here."""
    readme = (ROOT / "README.md").read_text()
    begin = readme.index(report.EMBED_BEGIN) + len(report.EMBED_BEGIN)
    block = readme[begin : readme.index(report.EMBED_END)].strip()
    assert block == report.readme_block(
        ROOT / "experiments" / "learning" / "results" / "quickstart"
    )


def test_control_continues_the_configs_own_suite_warm_start(tmp_path):
    """The control trains the RL config's warm start (clean or pooled demonstrations), and
    refuses a model it has no SFT recipe for."""
    import pytest

    from experiments.learning.control import warm_start_of

    assert warm_start_of(ROOT / "configs" / "quickstart.yaml")[1] in ("suite", "suite-pooled")
    for name, base in (("suite-sft", "suite"), ("suite-pooled-sft", "suite-pooled")):
        (tmp_path / "c.yaml").write_text(f"model:\n  model: {name}\n")
        assert warm_start_of(tmp_path / "c.yaml") == (name, base)
    for name in ("tiny-sft", "suite", "models/other"):
        (tmp_path / "c.yaml").write_text(f"model:\n  model: {name}\n")
        with pytest.raises(ValueError, match=f"model.model '{name}' is not one of"):
            warm_start_of(tmp_path / "c.yaml")


def test_run_config_reads_the_given_config(tmp_path):
    text = (ROOT / "configs" / "quickstart.yaml").read_text()
    other = tmp_path / "pooled.yaml"
    other.write_text(text.replace("model: suite-sft\n", "model: suite-pooled-sft\n"))
    cfg = run.run_config(3, tmp_path / "out", other)
    assert cfg["model"]["model"] == "suite-pooled-sft"
    assert cfg["seed_everything"] == cfg["model"]["seed"] == cfg["data"]["seed"] == 3
    assert run.run_config(3, tmp_path / "out")["model"]["model"] in (
        "suite-sft",
        "suite-pooled-sft",
    )


def test_overlays_merge_over_the_config_as_jsonargparse_layers_them(tmp_path):
    over = tmp_path / "over.yaml"
    over.write_text("model:\n  model: suite-pooled-sft\ndata:\n  engine: null\n")
    one = run.merged_config([run.CONFIG], tmp_path)
    assert one == run.CONFIG  # a single config is read in place
    merged = run.merged_config([run.CONFIG, over], tmp_path)
    assert merged == tmp_path / "config.yaml"
    import yaml

    cfg, base = yaml.safe_load(merged.read_text()), yaml.safe_load(run.CONFIG.read_text())
    assert cfg["model"]["model"] == "suite-pooled-sft" and cfg["data"]["engine"] is None
    assert cfg["model"]["router"] == base["model"]["router"]  # the rest kept
    assert cfg["trainer"] == base["trainer"]
    assert run.merge({"a": [1, 2], "b": {"c": 1}}, {"a": [3], "b": {"d": 2}}) == {
        "a": [3],
        "b": {"c": 1, "d": 2},
    }
    old = {"r": {"class_path": "A", "init_args": {"x": 1}}}
    assert run.merge(old, {"r": {"init_args": {"y": 2}}})["r"]["init_args"] == {"x": 1, "y": 2}
    assert run.merge(old, {"r": {"class_path": "B"}}) == {"r": {"class_path": "B"}}


def test_the_plot_draws_each_seeds_curve_and_the_readme_block_links_it(tmp_path):
    prov = {"threads": 1, "load_average": [0.5, 0.4, 0.3]}
    for seed, end in ((0, 0.45), (1, 0.40)):
        curve = [
            {"step": s, "tool_accuracy": 0.2 + (end - 0.2) * s / 40} for s in (0, 10, 20, 30, 40)
        ]
        _write(tmp_path / f"rl_seed{seed}", {
            "name": f"rl_seed{seed}", "seed": seed, "router": "slca_lightning.advantages.SLCARouter",
            "wall_s": 500.0, "rl_seconds": 300.0, "peak_rss_gb": 1.5, "steps": 40,
            "reward_first10": 1.0, "reward_last10": 1.2, "before": _metrics(0.2, 0.1),
            "after": _metrics(end, 0.2), "before_step": 0, "after_step": 40, "provenance": prov,
            "curve": curve,
        })  # fmt: skip
        _write(tmp_path / f"control_seed{seed}", {
            "seed": seed, "sft_steps": 100, "seconds_trained": 300.0, "metrics": _metrics(0.25, 0.1),
        })  # fmt: skip
    path = report.plot(tmp_path)
    assert path == tmp_path / report.PLOT and path.stat().st_size > 10_000
    block = report.readme_block(tmp_path, root=tmp_path.parent)
    assert block.startswith(
        f"![held-out strict tool accuracy against RL step, per seed, with the controls]({tmp_path.name}/{report.PLOT})"
    )
    assert "**seed 0 (SLCARouter)**" in block and "**Gains over seeds**" in block
    (tmp_path / "empty").mkdir()
    assert report.plot(tmp_path / "empty") is None  # no runs with a curve: no plot


def test_the_first_run_figures_are_the_committed_records():
    """The README's fresh-clone timing is ``first_run.py``'s record, word for word: wall
    time, peak RSS, threads and load average; and that run loaded the shipped warm start
    without training one."""
    import re

    record = json.loads((ROOT / "experiments/learning/results/first_run.json").read_text())
    assert record["shipped_warm_start_loaded"] and not record["warm_start_trained"]
    minutes, seconds = divmod(round(record["wall_s"]), 60)
    expected = (
        f"{minutes} min {seconds} s and {record['peak_rss_gb']:.2f} GB peak RSS "
        f"({record['torch_threads']} torch thread(s), load average "
        f"{record['load_average_at_start']:.2f} at start)"
    )
    for page in ("README.md", "experiments/learning/README.md"):
        text = re.sub(r"\s+", " ", (ROOT / page).read_text())
        assert expected in text, (page, expected)
