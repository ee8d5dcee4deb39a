"""The Python API is the CLI: a fit written with ``L.Trainer`` gets ``slca fit``'s thread choice,
its one step-counting progress bar (not Lightning's ``Epoch 0/-2``) and its quiet console, and
``slca_lightning.cli.main(args, run=False)`` builds module, data module and trainer from a
config file."""

from __future__ import annotations

from pathlib import Path

import lightning as L

from slca_lightning.cli.commands import main
from slca_lightning.data.task_sources import SyntheticTasks
from slca_lightning.rollout.datamodule import RolloutDataModule
from slca_lightning.training import threads
from slca_lightning.training.console import StepProgressBar
from slca_lightning.training.module import SLCAGRPOModule

ROOT = Path(__file__).resolve().parents[2]


def test_a_plain_lightning_fit_gets_the_clis_threads_bar_and_quiet_console(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(threads, "_APPLIED", [])  # as in a fresh process
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    module = SLCAGRPOModule(model="tiny", micro_batch_size=8)
    data = RolloutDataModule(
        tasks=SyntheticTasks(n_train=8, n_heldout=4), prompts_per_step=2, group_size=2,
        max_turns=1, max_new_tokens=8, max_response_tokens=16,
    )  # fmt: skip
    trainer = L.Trainer(
        max_steps=1, accelerator="cpu", logger=False, enable_checkpointing=False,
        default_root_dir=tmp_path, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(module, datamodule=data)
    assert trainer.global_step == 1
    assert threads._APPLIED == [1]  # the thread choice ran (OMP_NUM_THREADS=1 here)
    assert isinstance(trainer.progress_bar_callback, StepProgressBar)
    printed = capsys.readouterr()
    text = printed.out + printed.err
    assert "Epoch 0/-2" not in text and "Tip:" not in text and "dataloader_iter" not in text


def test_main_builds_module_data_and_trainer_from_a_config_file(tmp_path):
    cli = main(
        [
            "--config", str(ROOT / "configs" / "quickstart.yaml"), "--model.model=tiny",
            f"--trainer.default_root_dir={tmp_path}", "--trainer.logger=false",
            "--trainer.callbacks=[]",
        ],
        run=False,
    )  # fmt: skip
    assert isinstance(cli.model, SLCAGRPOModule)
    assert isinstance(cli.datamodule, RolloutDataModule)
    assert cli.trainer.max_steps == 40 and cli.model.hparams.temperature == 0.7
