"""Every shipped YAML parses, and every component in it instantiates through jsonargparse."""

from pathlib import Path

import pytest
import yaml
from jsonargparse import ArgumentParser

from slca_lightning.advantages import AdvantageRouter
from slca_lightning.rewards import RewardHead
from slca_lightning.segmenters import Segmenter

ROOT = Path(__file__).resolve().parents[2]
YAMLS = sorted((ROOT / "configs").rglob("*.yaml"))


def test_there_are_configs():
    assert YAMLS, "no YAML files under configs/"


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_yaml_parses(path):
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict) and data


def _instantiate(base, value):
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--component", type=base)
    cfg = parser.parse_object({"component": value})
    return parser.instantiate_classes(cfg).component


@pytest.mark.parametrize("name", ["slca", "grpo", "toolpo", "rltr", "mtgrpo"])
def test_each_router_is_one_class_path(name):
    spec = yaml.safe_load((ROOT / "configs/components/routers.yaml").read_text())[name]
    router = _instantiate(AdvantageRouter, spec)
    assert type(router).__name__.lower().startswith(name[:4])


@pytest.mark.parametrize(
    "name,base",
    [
        ("hierr", RewardHead),
        ("hierr_rltr", RewardHead),
        ("mask_runs", Segmenter),
        ("tags", Segmenter),
        ("whole", Segmenter),
    ],
)
def test_reward_heads_and_segmenters_instantiate(name, base):
    spec = yaml.safe_load((ROOT / "configs/components/rewards.yaml").read_text())[name]
    assert isinstance(_instantiate(base, spec), base)


def test_unknown_init_arg_fails_naming_it():
    with pytest.raises(Exception, match="tool_wieght"):
        _instantiate(
            AdvantageRouter,
            {
                "class_path": "slca_lightning.advantages.SLCARouter",
                "init_args": {"tool_wieght": 2.0},
            },
        )
