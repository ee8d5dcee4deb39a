"""Loading a checkpoint never runs code from it (issue 17, part 5).

A real checkpoint is written by a one-step ``slca fit`` of the built-in tiny model; it loads
weights-only in ``slca eval``, ``SLCAGRPOModule.load_from_checkpoint`` and ``slca fit
--ckpt_path`` alike. Crafted checkpoints are refused before anything runs: a pickle whose
loading would execute code (it would create a marker file), hyper-parameters naming
``os.system`` or a class outside the trusted prefixes, a foreign instantiator, and a
``config.yaml`` beside the checkpoint naming such a class. A class under a prefix the user
trusts explicitly (``--trust_class_prefix``) is rebuilt.
"""

from __future__ import annotations

import builtins
import sys
from pathlib import Path

import pytest
import torch

from slca_lightning.cli import commands as cli
from slca_lightning.cli import evaluate as standalone
from slca_lightning.training.checkpoints import (
    UntrustedCheckpointError,
    is_trusted,
    load_checkpoint,
)
from slca_lightning.training.module import SLCAGRPOModule
from slca_lightning.training.reference import weights_digest

ARGS = [
    "--model.model=tiny",
    "--model.micro_batch_size=4",
    "--data.prompts_per_step=2",
    "--data.group_size=2",
    "--data.max_turns=1",
    "--data.max_new_tokens=8",
    "--data.max_response_tokens=32",
    "--data.tasks.class_path=slca_lightning.data.task_sources.SyntheticTasks",
    "--data.tasks.init_args.n_train=8",
    "--data.tasks.init_args.n_heldout=2",
    "--trainer.accelerator=cpu",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.logger=false",
]


def fit(root: Path, *extra: str) -> cli.SLCACLI:
    return cli.main(
        [
            "fit",
            *ARGS,
            f"--trainer.default_root_dir={root}",
            "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
            f"--trainer.callbacks.dirpath={root}/ckpt",
            *extra,
        ]
    )


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("real")
    fit(root, "--trainer.max_steps=1")
    (ckpt,) = (root / "ckpt").glob("*.ckpt")
    assert (root / "config.yaml").is_file()
    return ckpt


class Payload:
    """Pickles into a call that writes a marker file when unpickled (a code-running pickle)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (builtins.exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


def tampered(real: Path, dest: Path, **hparams) -> Path:
    ckpt = torch.load(real, map_location="cpu", weights_only=True)
    ckpt["hyper_parameters"].update(hparams)
    torch.save(ckpt, dest)
    return dest


def test_the_real_checkpoint_loads_weights_only(real):
    ckpt = load_checkpoint(real)
    assert ckpt["global_step"] == 1 and ckpt["state_dict"]
    module = SLCAGRPOModule.load_from_checkpoint(real, map_location="cpu", strict=False)
    assert module.hparams.model == "tiny" and module.hparams.micro_batch_size == 4


def test_slca_eval_rebuilds_the_module_with_its_weights(real):
    config = standalone.find_run_config(str(real))
    module = standalone.load_module(str(real), None, config, (), True)
    ckpt = load_checkpoint(real)
    saved = ckpt["state_dict"]
    state = module.state_dict()
    # the frozen reference is left out of the file and rebuilt from the model source
    assert not any(k.startswith("reference.") for k in saved)
    assert set(saved) == {k for k in state if not k.startswith("reference.")}
    assert any(k.startswith("reference.") for k in state)
    assert ckpt["slca_reference"]["model"] == "tiny"
    assert weights_digest(module.reference) == ckpt["slca_reference"]["sha256"]
    for name, tensor in saved.items():
        assert torch.equal(state[name], tensor), name


def test_a_changed_model_source_is_refused_and_save_reference_keeps_it(real, tmp_path):
    config = standalone.find_run_config(str(real))
    ckpt = torch.load(real, map_location="cpu", weights_only=True)
    ckpt["slca_reference"]["sha256"] = "0" * 64
    torch.save(ckpt, tmp_path / "other.ckpt")
    with pytest.raises(ValueError, match=r"reference rebuilt from model 'tiny' is not the one"):
        standalone.load_module(str(tmp_path / "other.ckpt"), None, config, (), True)
    module = standalone.load_module(str(real), None, config, (), True)
    module.hparams.save_reference = True
    kept = {"state_dict": module.state_dict()}
    module.on_save_checkpoint(kept)
    assert "slca_reference" not in kept and any(
        k.startswith("reference.") for k in kept["state_dict"]
    )
    module.hparams.save_reference = False
    module.on_save_checkpoint(kept)
    assert kept["slca_reference"]["entries"] > 0
    assert not any(k.startswith("reference.") for k in kept["state_dict"])


def test_fit_resumes_from_the_real_checkpoint(real, tmp_path):
    resumed = fit(tmp_path, "--trainer.max_steps=2", f"--ckpt_path={real}")
    assert resumed.trainer.global_step == 2


def test_fit_refuses_weights_only_false(real, tmp_path):
    with pytest.raises(cli.ConfigError, match=r"fit\.weights_only: must be true"):
        fit(tmp_path, "--trainer.max_steps=2", f"--ckpt_path={real}", "--weights_only=false")


def test_a_pickle_that_runs_code_is_refused_everywhere(real, tmp_path, monkeypatch, capsys):
    marker = tmp_path / "marker"
    evil = tmp_path / "evil.ckpt"
    ckpt = torch.load(real, map_location="cpu", weights_only=True)
    ckpt["callbacks"] = {"x": Payload(marker)}
    torch.save(ckpt, evil)
    with pytest.raises(UntrustedCheckpointError, match=r"evil\.ckpt: refused: .*weights_only"):
        load_checkpoint(evil)
    with pytest.raises(UntrustedCheckpointError):
        SLCAGRPOModule.load_from_checkpoint(evil)
    with pytest.raises(UntrustedCheckpointError):
        standalone.main(["--checkpoint", str(evil), "--out", str(tmp_path / "out")])
    with pytest.raises(UntrustedCheckpointError):
        fit(tmp_path / "fit", "--trainer.max_steps=2", f"--ckpt_path={evil}")
    monkeypatch.setattr(sys, "argv", ["slca", "eval", "--checkpoint", str(evil)])
    with pytest.raises(SystemExit) as exit_:
        cli.script()
    assert exit_.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"slca: error: {evil}: refused:")
    assert not marker.exists()
    torch.load(evil, weights_only=False)  # the payload is real: unsafe loading runs it
    assert marker.read_text() == "ran"


@pytest.mark.parametrize(
    ("hparams", "key"),
    [
        ({"router": {"class_path": "os.system", "init_args": {"command": "true"}}}, "router"),
        (
            {
                "reward_head": {
                    "class_path": "slca_lightning.rewards.HierarchicalReward",
                    "init_args": {"judge": {"class_path": "subprocess.Popen"}},
                }
            },
            "reward_head.init_args.judge",
        ),
        ({"_class_path": "evilpkg.Module"}, None),
        ({"router": {"class_path": "slca_lightning_evil.Router"}}, "router"),
    ],
)
def test_untrusted_class_paths_are_refused_naming_the_key(real, tmp_path, hparams, key):
    bad = tampered(real, tmp_path / "bad.ckpt", **hparams)
    where = f"hyper_parameters.{key}.class_path" if key else "hyper_parameters._class_path"
    pattern = rf"{where} = '[^']+' is outside the trusted class prefixes"
    with pytest.raises(UntrustedCheckpointError, match=pattern):
        load_checkpoint(bad)
    with pytest.raises(UntrustedCheckpointError, match=pattern):
        SLCAGRPOModule.load_from_checkpoint(bad)
    with pytest.raises(UntrustedCheckpointError, match=pattern):
        standalone.load_module(str(bad), None, None)
    with pytest.raises(UntrustedCheckpointError, match=pattern):
        fit(tmp_path / "fit", "--trainer.max_steps=2", f"--ckpt_path={bad}")


def test_a_foreign_instantiator_is_refused(real, tmp_path):
    bad = tampered(real, tmp_path / "bad.ckpt", _instantiator="os.system")
    with pytest.raises(UntrustedCheckpointError, match=r"_instantiator = 'os.system'"):
        load_checkpoint(bad)


def test_a_config_beside_the_checkpoint_is_checked_too(real, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    ckpt = folder / "last.ckpt"
    ckpt.write_bytes(real.read_bytes())
    (folder / "config.yaml").write_text(
        "data:\n  tasks:\n    class_path: evilpkg.Tasks\n", encoding="utf-8"
    )
    with pytest.raises(UntrustedCheckpointError, match=r"data\.tasks\.class_path = 'evilpkg"):
        standalone.main(["--checkpoint", str(ckpt), "--out", str(tmp_path / "out")])


def test_an_explicitly_trusted_prefix_is_rebuilt(real, tmp_path, monkeypatch):
    pkg = tmp_path / "site"
    pkg.mkdir()
    (pkg / "my_trusted_routers.py").write_text(
        "from slca_lightning.advantages import SLCARouter\n\n\n"
        "class MyRouter(SLCARouter):\n"
        '    """A router from a package the user trusts."""\n',
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(pkg))
    path = "my_trusted_routers.MyRouter"
    ckpt = tampered(real, tmp_path / "mine.ckpt", router={"class_path": path})
    with pytest.raises(UntrustedCheckpointError, match="--trust_class_prefix my_trusted_routers"):
        standalone.load_module(str(ckpt), None, None)
    module = standalone.load_module(str(ckpt), None, None, ["my_trusted_routers"])
    assert type(module.router).__name__ == "MyRouter"
    module = SLCAGRPOModule.load_from_checkpoint(
        ckpt, strict=False, trust_class_prefix=["my_trusted_routers"]
    )
    assert type(module.router).__name__ == "MyRouter"


def test_prefix_matching_is_by_package():
    assert is_trusted("slca_lightning.advantages.SLCARouter")
    assert is_trusted("callbacks.InDomainEval")
    assert not is_trusted("slca_lightning_evil.X") and not is_trusted("callbacksx.Y")
    assert is_trusted("mypkg.sub.C", ["mypkg."]) and not is_trusted("mypkgevil.C", ["mypkg"])


def test_settings_this_version_no_longer_takes_are_ignored_by_slca_eval(real, tmp_path, caplog):
    old = tampered(real, tmp_path / "old.ckpt", removed_setting=3)
    with caplog.at_level("WARNING", logger="slca_lightning.cli.evaluate"):
        module = standalone.load_module(str(old), None, None)
    assert module.hparams.model == "tiny" and "removed_setting" not in module.hparams
    assert "ignoring stored hyper-parameters ['removed_setting']" in caplog.text


CALLBACKS = [  # every callback of the quickstart that keeps state, and LoRA settings
    "--trainer.callbacks+=callbacks.InDomainEval",
    "--trainer.callbacks.num_tasks=2",
    "--trainer.callbacks.every_n_steps=1",
    "--trainer.callbacks+=callbacks.GradientDiagnostics",
    "--trainer.callbacks.every_n_steps=1",
    "--trainer.callbacks+=callbacks.RewardCurves",
    "--trainer.callbacks+=callbacks.SimulatorStats",
    "--model.lora.r=4",
    "--model.lora.alpha=8",
    "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
]


def test_callback_states_and_lora_load_weights_only_and_resume(tmp_path):
    first = tmp_path / "first"
    fit(first, "--trainer.max_steps=1", *CALLBACKS, f"--trainer.logger.init_args.save_dir={first}")
    (ckpt,) = (first / "ckpt").glob("*.ckpt")
    saved = load_checkpoint(ckpt)  # no add_safe_globals needed: plain values only
    assert {"GradientDiagnostics", "InDomainEval", "RewardCurves"} <= set(saved["callbacks"])
    assert saved["callbacks"]["GradientDiagnostics"]["history"]
    assert saved["hyper_parameters"]["lora"]["r"] == 4
    second = tmp_path / "second"
    resumed = fit(
        second,
        "--trainer.max_steps=2",
        *CALLBACKS,
        f"--trainer.logger.init_args.save_dir={second}",
        f"--ckpt_path={ckpt}",
    )
    assert resumed.trainer.global_step == 2
    (diag,) = [c for c in resumed.trainer.callbacks if type(c).__name__ == "GradientDiagnostics"]
    assert [step for step, _ in diag.history] == [1, 2]  # restored, then extended
