"""Modules moved by the layout changes still import under their old names (configs and
checkpoints name classes by them), as the very same module objects."""

import importlib

import pytest

from slca_lightning.eval import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_eval_module_name_is_the_moved_module(old):
    module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])
    assert module.__spec__.name == MOVED[old]  # its own spec, not the alias's


def test_class_paths_of_configs_resolve_old_and_new():
    from slca_lightning.eval.tau2.users import ScriptedUser

    old = importlib.import_module("slca_lightning.eval.tau2_users").ScriptedUser
    assert old is ScriptedUser
    bfcl = importlib.import_module("slca_lightning.eval.bfcl")
    assert bfcl.BFCLEvaluator.__module__ == "slca_lightning.eval.bfcl.evaluator"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        bfcl.nope  # noqa: B018


def test_old_runtime_paths_out_of_testing_still_import():
    from slca_lightning.rollout.scripted_engine import ScriptedEngine
    from slca_lightning.testing.mcp_server import build_mcp_server
    from slca_lightning.testing.scripted import ScriptedEngine as Old
    from slca_lightning.tools.suite_mcp_server import build_mcp_server as new

    assert Old is ScriptedEngine and build_mcp_server is new


def test_a_class_that_left_its_module_says_where_it_went():
    import slca_lightning.rewards.judges as judges
    from slca_lightning.rewards import RuleJudge

    with pytest.raises(
        AttributeError, match=r"moved to slca_lightning\.rewards\.rule_judge\.RuleJudge"
    ):
        judges.RuleJudge  # noqa: B018
    assert RuleJudge.__module__ == "slca_lightning.rewards.rule_judge"


def test_every_registered_old_path_imports_as_its_new_module():
    """Every alias the packages register (tools/, rewards/, backends/, sft, eval/)."""
    import slca_lightning.backends
    import slca_lightning.eval
    import slca_lightning.rewards
    import slca_lightning.tools  # noqa: F401  (importing a package registers its aliases)
    from slca_lightning.moved import MOVED

    assert {"slca_lightning.sft", "slca_lightning.tools.parsing", "slca_lightning.rewards.gold",
            "slca_lightning.backends.engine", "slca_lightning.tools.fidelity"} <= set(MOVED)  # fmt: skip
    for old, new in MOVED.items():
        assert importlib.import_module(old) is importlib.import_module(new), old
