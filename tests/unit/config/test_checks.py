"""Range checks of numeric settings (issue 17, part 4): every public class of
``slca_lightning`` and ``callbacks`` with numeric ``__init__`` arguments has a rule for each
of them, a clearly invalid value is refused with the full key named, and the ``slca``
command turns config errors into one line on stderr with exit status 2."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import pkgutil
import re
import sys
import typing

import pytest

import callbacks
import slca_lightning
from slca_lightning.cli import commands as cli
from slca_lightning.config.checks import (
    RANGES,
    RECORDS,
    ConfigError,
    Range,
    check_args,
    check_range,
    class_key,
    rules_for,
    validate_config,
)
from slca_lightning.rollout.datamodule import RolloutDataModule
from slca_lightning.training.module import SLCAGRPOModule

FIT = {"model": SLCAGRPOModule, "data": RolloutDataModule}  # the roots slca fit validates


def _numeric(hint, default) -> bool:
    text = str(hint)
    if text.startswith(("typing.Callable", "collections.abc.Callable")):
        return False  # a function's argument types are not a setting
    if hint in (int, float) or "int" in text or "float" in text:
        return True
    return isinstance(default, (int, float)) and not isinstance(default, bool)


def public_classes_with_numeric_args() -> dict[str, tuple[type, list[str]]]:
    """``module.Qualname`` → (class, numeric argument names) for every public class defined
    in slca_lightning (testing/ aside: test doubles) and callbacks."""
    names = []
    for pkg in (slca_lightning, callbacks):
        names.append(pkg.__name__)
        names += [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")]
    found: dict[str, tuple[type, list[str]]] = {}
    for name in names:
        if ".testing" in name or name.endswith("__main__"):
            continue
        try:
            mod = importlib.import_module(name)
        except ImportError as err:  # an optional extra (vllm) may be absent
            if "vllm" in str(err):
                continue
            raise
        for cname, cls in vars(mod).items():
            if cname.startswith("_") or not inspect.isclass(cls) or cls.__module__ != name:
                continue
            if issubclass(cls, BaseException):
                continue
            try:
                hints = typing.get_type_hints(cls.__init__)
            except Exception:
                hints = {}
            params = inspect.signature(cls.__init__).parameters.values()
            nums = [
                p.name
                for p in params
                if p.name != "self"
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                and _numeric(hints.get(p.name, p.annotation), p.default)
            ]
            if nums:
                found[class_key(cls)] = (cls, nums)
    return found


CLASSES = public_classes_with_numeric_args()
SETTINGS = sorted(k for k in CLASSES if k not in RECORDS)


def invalid_value(rule: Range):
    """A value the rule must refuse: NaN for numbers, else just below the lower bound
    (or a negative count), or a float for an integer."""
    if rule.kind == "float":
        return math.nan
    if rule.lo is not None:
        return int(rule.lo) - 1
    return 0.5


def test_the_walk_finds_the_main_classes():
    for key in (
        "slca_lightning.training.module.SLCAGRPOModule",
        "slca_lightning.rollout.datamodule.RolloutDataModule",
        "slca_lightning.rollout.agent_loop.AgentLoop",
        "slca_lightning.rollout.hf_engine.HFEngine",
        "callbacks.in_domain_eval.InDomainEval",
        "callbacks.rollout_table.RolloutTable",
    ):
        assert key in SETTINGS, key
    assert len(SETTINGS) >= 40


@pytest.mark.parametrize("key", SETTINGS)
def test_every_numeric_setting_has_a_rule_and_refuses_an_invalid_value(key):
    cls, nums = CLASSES[key]
    rules = rules_for(cls)
    missing = [n for n in nums if n not in rules]
    assert not missing, f"{key}: no range rule for {missing} (add them to config_checks.RANGES)"
    for name in nums:
        rule = rules[name]
        bad = invalid_value(rule)
        tree = {"x": [{"class_path": key, "init_args": {name: bad}}]}
        with pytest.raises(ConfigError) as err:
            validate_config(tree, roots={})
        message = str(err.value)
        assert message.startswith(f"x[0].init_args.{name}: must be "), message
        assert "\n" not in message
        assert f"got {bad!r}" in message


CHECKED_BY_CONSTRUCTOR = [
    "slca_lightning.training.module.SLCAGRPOModule",
    "slca_lightning.rollout.datamodule.RolloutDataModule",
    "slca_lightning.rollout.hf_engine.HFEngine",
    "slca_lightning.rollout.vllm_engine.VLLMEngine",
    "slca_lightning.models.sft.SFTModule",
    "slca_lightning.models.sft.SFTDataModule",
    "slca_lightning.training.console.StepProgressBar",
    "callbacks.in_domain_eval.InDomainEval",
    "callbacks.heldout_table.HeldoutTable",
    "callbacks.bfcl_eval.BFCLEval",
    "callbacks.tau2_eval.Tau2Eval",
    "callbacks.gradient_diagnostics.GradientDiagnostics",
    "callbacks.rollout_table.RolloutTable",
]


@pytest.mark.parametrize("key", CHECKED_BY_CONSTRUCTOR)
def test_constructors_refuse_every_invalid_value_naming_it(key):
    if key not in CLASSES:
        pytest.skip(f"{key} not importable here")
    cls, nums = CLASSES[key]
    rules = rules_for(cls)
    for name in nums:
        bad = invalid_value(rules[name])
        with pytest.raises(ConfigError) as err:
            cls(**{name: bad})
        assert re.match(rf"^[\w.]+\.{name}: must be ", str(err.value)), str(err.value)


def test_agent_loop_refuses_a_bad_cap():
    from slca_lightning.rollout.agent_loop import AgentLoop
    from slca_lightning.rollout.engine import SamplingConfig

    with pytest.raises(ConfigError, match=r"^data\.max_turns: must be an integer >= 1, got 0$"):
        AgentLoop(None, None, None, SamplingConfig(), max_turns=0)


def test_rules_only_name_real_arguments():
    for key, rules in RANGES.items():
        module, _, name = key.rpartition(".")
        cls = getattr(importlib.import_module(module), name)
        params = inspect.signature(cls.__init__).parameters
        assert set(rules) <= set(params), (key, set(rules) - set(params))


@pytest.mark.parametrize("key", SETTINGS)
def test_defaults_are_within_their_ranges(key):
    cls, _ = CLASSES[key]
    defaults = {
        n: p.default
        for n, p in inspect.signature(cls.__init__).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    check_args(cls, defaults)


def test_messages():
    with pytest.raises(ConfigError, match=r"^model\.max_turns: must be an integer >= 1, got -1$"):
        check_range("model.max_turns", -1, 1, kind="int")
    with pytest.raises(ConfigError, match=r"^k: must be a number in \(0, 1\], got 0$"):
        check_range("k", 0, 0, 1, lo_open=True)
    with pytest.raises(ConfigError, match=r"^k: must be a number > 0 or null, got inf$"):
        check_range("k", math.inf, 0, lo_open=True, none=True)
    with pytest.raises(ConfigError, match=r"^k: must be an integer >= 0, got True$"):
        check_range("k", True, 0, kind="int")
    with pytest.raises(ConfigError, match=r"^k: must be an integer >= 0, got 2.0$"):
        check_range("k", 2.0, 0, kind="int")
    with pytest.raises(ConfigError, match=r"^k\[1\]: must be a number in \[0, 1\], got 1.5$"):
        Range("float", 0, 1, each=True).check("k", [0.5, 1.5])
    check_range("k", None, 1, kind="int", none=True)
    check_range("k", 3, 1, kind="int")
    check_range("k", 1, 0, 1)  # an integer is a number


def test_constructors_check_with_the_config_key():
    from slca_lightning.rollout.datamodule import RolloutDataModule
    from slca_lightning.training.module import SLCAGRPOModule

    with pytest.raises(ConfigError, match=r"^data\.max_turns: must be an integer >= 1, got -1$"):
        RolloutDataModule(max_turns=-1)
    with pytest.raises(
        ConfigError, match=r"^model\.learning_rate: must be a number > 0 or null, got nan"
    ):
        SLCAGRPOModule(learning_rate=math.nan)


def test_nested_components_and_dataclasses_are_walked():
    config = {
        "model": {
            "learning_rate": 1e-4,
            "lora": {"r": 0, "alpha": 16, "dropout": 0.0},
        },
        "data": {"max_turns": 2},
    }
    with pytest.raises(ConfigError, match=r"^model\.lora\.r: must be an integer >= 1, got 0$"):
        validate_config(config, FIT)
    config["model"]["lora"]["r"] = 8
    config["model"]["reward_head"] = {
        "class_path": "slca_lightning.rewards.HierarchicalReward",
        "init_args": {"judge": {"class_path": "slca_lightning.rewards.RuleJudge",
                                "init_args": {"max_words": -3}}},
    }  # fmt: skip
    with pytest.raises(
        ConfigError, match=r"^model\.reward_head\.init_args\.judge\.init_args\.max_words: "
    ):
        validate_config(config, FIT)
    del config["model"]["reward_head"]
    config["trainer"] = {
        "callbacks": [
            {"class_path": "callbacks.RewardCurves"},
            {"class_path": "callbacks.InDomainEval", "init_args": {"num_tasks": -1}},
        ]
    }
    with pytest.raises(
        ConfigError, match=r"^trainer\.callbacks\[1\]\.init_args\.num_tasks: must be an integer"
    ):
        validate_config(config, FIT)
    config["trainer"]["callbacks"][1]["init_args"]["num_tasks"] = 8
    validate_config(config, FIT)


# -- the command --------------------------------------------------------------------------
def run_script(monkeypatch, capsys, *argv: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["slca", *argv])
    monkeypatch.delenv("SLCA_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_:
        cli.script()
    return exit_.value.code, capsys.readouterr().err


BASE = ("fit", "--config", "configs/quickstart.yaml", "--trainer.max_steps=0")


@pytest.mark.parametrize(
    ("arg", "last_line"),
    [
        ("--data.max_turns=-1", "slca: error: data.max_turns: must be an integer >= 1, got -1"),
        (
            "--model.learning_rate=-1",
            "slca: error: model.learning_rate: must be a number > 0 or null, got -1.0",
        ),
        (
            "--data.tasks.init_args.n_train=-5",
            "slca: error: data.tasks.init_args.n_train: must be an integer >= 1, got -5",
        ),
        (
            "--model.learning_rat=0.1",
            "slca: error: unknown key 'model.learning_rat'; did you mean model.learning_rate? "
            "(`slca fit --help` lists every key)",
        ),
    ],
)
def test_bad_values_exit_2_with_one_line_and_no_usage(monkeypatch, capsys, arg, last_line):
    code, err = run_script(monkeypatch, capsys, *BASE, arg)
    assert code == 2
    lines = err.strip().splitlines()
    assert lines[-1] == last_line
    assert "usage:" not in err and "Traceback" not in err


def test_an_unknown_choice_is_one_line_naming_the_key(monkeypatch, capsys):
    code, err = run_script(monkeypatch, capsys, *BASE, "--model.lr_schedule=foo")
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("slca: error: ") and "model.lr_schedule" in last and "foo" in last
    assert "usage:" not in err


def test_a_bad_component_argument_names_the_component(monkeypatch, capsys):
    code, err = run_script(monkeypatch, capsys, *BASE, "--model.router.init_args.nope=1")
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith(
        "slca: error: model.router: slca_lightning.advantages.SLCARouter has no argument 'nope'"
    )
    assert "its arguments: tool_weight, summary_weight" in last and len(last) < 400


def test_help_still_prints_usage(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(sys, "argv", ["slca", "fit", "--help"])
    monkeypatch.setenv("SLCA_CACHE", str(tmp_path))
    assert cli.script() is None  # exit status 0
    out = capsys.readouterr().out
    assert out.startswith("usage:") and "--data.max_turns" in out


def test_in_process_main_raises_config_error():
    with pytest.raises(ConfigError, match=r"^data\.group_size: must be an integer >= 1, got 0$"):
        cli.main([*BASE, "--data.group_size=0"])


def test_records_are_not_settings():
    for key in RECORDS:
        module, _, name = key.rpartition(".")
        cls = getattr(importlib.import_module(module), name)
        assert key not in RANGES
        assert dataclasses.is_dataclass(cls) or name in (
            "RowReader",
            "SLCACLI",
            "AsyncRolloutStream",
        ), key
