"""Every shipped YAML parses, and every component in it instantiates through jsonargparse."""

from pathlib import Path

import pytest
import yaml
from jsonargparse import ArgumentParser

from slca_lightning.advantages import AdvantageRouter
from slca_lightning.rewards import RewardHead
from slca_lightning.segmenters import Segmenter

ROOT = Path(__file__).resolve().parents[3]
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


TRAINER_CONFIGS = [
    "quickstart.yaml",
    "smollm2.yaml",
    "slca_grpo.yaml",
    "grpo.yaml",
    "toolpo.yaml",
    "rltr.yaml",
    "mtgrpo.yaml",
]


@pytest.mark.parametrize("name", TRAINER_CONFIGS)
def test_trainer_configs_build_through_the_cli(name, tmp_path):
    """Parse and instantiate every component (models load lazily, so no weights are needed)."""
    from slca_lightning.cli.commands import main

    cli = main(
        ["--config", str(ROOT / "configs" / name), f"--trainer.default_root_dir={tmp_path}"],
        run=False,
    )
    assert cli.model.router is not None and cli.datamodule.source is not None
    # the reward head produces every channel the router reads (checked again at fit start)
    assert cli.model.router.channels <= cli.model.reward_head.channel_names
    # every run can resume from checkpoints/last.ckpt (--ckpt_path last, slca export)
    checkpoints = cli.trainer.checkpoint_callbacks
    assert checkpoints and all(c.save_last for c in checkpoints), name


def test_lora_overlay_layers_on_the_paper_config(tmp_path):
    from slca_lightning.cli.commands import main

    cli = main(
        [
            "--config",
            str(ROOT / "configs/slca_grpo.yaml"),
            "--config",
            str(ROOT / "configs/overlays/lora.yaml"),
            f"--trainer.default_root_dir={tmp_path}",
        ],
        run=False,
    )
    assert cli.model.lora.r == 16 and cli.model.lora.alpha == 32


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


@pytest.mark.parametrize("name", ["grpo.yaml", "toolpo.yaml", "rltr.yaml", "mtgrpo.yaml"])
def test_baselines_differ_from_slca_only_in_the_router(name):
    base = _flat(yaml.safe_load((ROOT / "configs/slca_grpo.yaml").read_text()))
    other = _flat(yaml.safe_load((ROOT / "configs" / name).read_text()))
    differ = {k for k in base.keys() | other.keys() if base.get(k) != other.get(k)}
    allowed_prefixes = ("model.router", "trainer.default_root_dir", "trainer.logger")
    assert differ and all(k.startswith(allowed_prefixes) for k in differ), differ


def test_sft_config_builds_through_slca_sft(tmp_path):
    from slca_lightning.cli.commands import sft

    cli = sft(
        [
            "--config",
            str(ROOT / "configs/sft_smollm2.yaml"),
            f"--trainer.default_root_dir={tmp_path}",
        ],
        run=False,
    )
    assert cli.model.hparams.model == "smollm2-135m-instruct"
    assert cli.model.hparams.output_dir == "runs/sft_smollm2/model"
    assert cli.datamodule.skip == (256, 512) and cli.datamodule.batch_size == 4


def quickstart_with(overlay: str, root) -> object:
    """The quickstart with ``configs/overlays/<overlay>.yaml`` on top, built but not run."""
    from slca_lightning.cli.commands import main

    return main(
        [
            "--config",
            str(ROOT / "configs/quickstart.yaml"),
            "--config",
            str(ROOT / f"configs/overlays/{overlay}.yaml"),
            f"--trainer.default_root_dir={root}",
        ],
        run=False,
    )


def test_json_calls_overlay_sets_the_tool_format(tmp_path):
    from slca_lightning.calls.formats import JSONFormat

    cli = quickstart_with("json_calls", tmp_path)
    fmt = cli.datamodule.tool_format
    assert isinstance(fmt, JSONFormat) and fmt.markers == ["<|python_tag|>"] and fmt.fences
    assert cli.datamodule.turn_end == "eos"


def test_llama3_calls_overlay_sets_the_response_template_format(tmp_path):
    from slca_lightning.calls.template_format import RESPONSE_TEMPLATES, ResponseTemplateFormat

    cli = quickstart_with("llama3_calls", tmp_path)
    fmt = cli.datamodule.tool_format
    assert isinstance(fmt, ResponseTemplateFormat)
    assert fmt.spec == RESPONSE_TEMPLATES["llama3_json"] and cli.datamodule.turn_end == "eos"


def test_stop_decision_overlay_credits_the_stop_token_as_a_tool_token(tmp_path):
    from slca_lightning.segmenters import MaskRunSegmenter

    cli = quickstart_with("stop_decision", tmp_path)
    seg = cli.model.segmenter
    assert isinstance(seg, MaskRunSegmenter) and seg.stop_decision_tokens == 1
    # the rest of the quickstart is untouched
    assert cli.model.reward_head.credit_abstention is True


def test_clean_demos_overlay_swaps_only_the_warm_start(tmp_path):
    cli = quickstart_with("clean_demos", tmp_path)
    assert cli.model.hparams.model == "suite-sft"
    assert cli.model.hparams.learning_rate == 5e-5 and cli.model.reward_head.credit_abstention


def test_async_overlay_generates_one_batch_ahead_with_the_importance_weight(tmp_path):
    cli = quickstart_with("async", tmp_path)
    assert cli.datamodule.max_staleness == 1 and cli.model.hparams.tis_cap == 2.0
    assert cli.model.hparams.model == "suite-pooled-sft"  # the rest of the quickstart as is
