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
    assert block == report.readme_block(ROOT / "experiments" / "learning" / "results")


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
