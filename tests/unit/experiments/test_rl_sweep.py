"""experiments/learning/rl_sweep.py: every variant is the quickstart plus valid overrides."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest
import yaml
from jsonargparse import ArgumentParser

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from experiments.learning import rl_sweep  # noqa: E402
from slca_lightning.advantages import AdvantageRouter  # noqa: E402
from slca_lightning.config.checks import validate_config  # noqa: E402
from slca_lightning.rewards import RewardHead  # noqa: E402
from slca_lightning.rollout.datamodule import RolloutDataModule  # noqa: E402
from slca_lightning.training.module import SLCAGRPOModule  # noqa: E402

FIT = {"model": SLCAGRPOModule, "data": RolloutDataModule}  # the roots slca fit validates

ARGS = argparse.Namespace(max_steps=40, accelerator="cpu", minutes=2.5, every=20)


def _instantiate(base, value):
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--component", type=base)
    return parser.instantiate_classes(parser.parse_object({"component": value})).component


@pytest.mark.parametrize("name", sorted(rl_sweep.VARIANTS))
def test_every_variant_is_a_valid_quickstart_config(name, tmp_path):
    cfg = rl_sweep.build_config(name, 3, tmp_path, ARGS)
    validate_config(cfg, FIT)  # ranges of every numeric setting, unknown keys
    assert cfg["seed_everything"] == cfg["model"]["seed"] == cfg["data"]["seed"] == 3
    assert cfg["trainer"]["max_time"] == {"seconds": 150}
    assert cfg["trainer"]["logger"][0]["init_args"]["save_dir"] == str(tmp_path)
    (evaluator,) = [c for c in cfg["trainer"]["callbacks"] if "InDomainEval" in c["class_path"]]
    assert evaluator["init_args"]["every_n_steps"] == 20
    _instantiate(AdvantageRouter, cfg["model"]["router"])
    _instantiate(RewardHead, cfg["model"]["reward_head"])
    for key, value in rl_sweep.VARIANTS[name].items():
        node = cfg
        for part in key.split("."):
            node = node[part]
        assert node == value, key
    quickstart = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    assert cfg["data"]["tasks"]["class_path"] == quickstart["data"]["tasks"]["class_path"]


def test_readme_sweep_table_is_rendered_from_the_committed_results():
    """experiments/learning/README.md's table is ``rl_sweep.py --table`` of the JSON lines."""
    import json

    here = ROOT / "experiments" / "learning"
    records = [
        json.loads(line)
        for line in (here / "results" / "rl_sweep_2026-12-04.jsonl").read_text().splitlines()
    ]
    assert len(records) >= 9 and all(r["eval"][0]["step"] == 0 for r in records)
    text = (here / "README.md").read_text()
    begin, end = "<!-- sweep table: begin -->\n", "<!-- sweep table: end -->"
    table = text[text.index(begin) + len(begin) : text.index(end)]
    assert table == rl_sweep.render(records)


def test_readme_fix16_table_is_the_training_curves_of_the_file():
    """experiments/learning/README.md's fixed-set table is ``rl_sweep.py --train-table``."""
    import json

    here = ROOT / "experiments" / "learning"
    lines = (here / "results" / "rl_sweep_2026-12-06.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert {r["name"] for r in records} >= {"fix16-lr1e-4", "fix16-lr3e-4", "fix16-lr1e-3-neg0"}
    text = (here / "README.md").read_text()
    begin, end = "<!-- fix16 table: begin -->\n", "<!-- fix16 table: end -->"
    table = text[text.index(begin) + len(begin) : text.index(end)]
    assert table == rl_sweep.render_train(records)
