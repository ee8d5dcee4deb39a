"""``slca sft`` end to end on the built-in tiny model: the shipped SmolLM2 recipe with the
model swapped, written as an HF folder that ``load_policy``, plain transformers and an RL
config load; with LoRA the adapters are merged into the written weights. Nothing mocked."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from slca_lightning.cli.commands import sft
from slca_lightning.models.policy import load_policy

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, *extra: str):
    out = tmp_path / "model"
    cli = sft(
        [
            "--config", str(ROOT / "configs/sft_smollm2.yaml"),
            "--model.model=tiny",
            "--model.learning_rate=1e-3",
            "--trainer.max_steps=2",
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
            "--data.n_tasks=8",
            "--data.skip=null",
            "--threads=1",
            f"--model.output_dir={out}",
            f"--trainer.default_root_dir={tmp_path}",
            *extra,
        ]
    )  # fmt: skip
    return cli, out


def test_slca_sft_writes_a_folder_every_loader_reads(tmp_path):
    from transformers import AutoModelForCausalLM

    cli, out = _run(tmp_path)
    assert cli.trainer.global_step == 2
    assert (out / "config.json").is_file() and (out / "slca_export.json").is_file()
    plain = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    trained = dict(cli.model.model.named_parameters())
    for name, p in plain.named_parameters():
        assert torch.equal(p, trained[name].detach()), name
    net, tok = load_policy(str(out))
    assert tok.chat_template == cli.model.tokenizer.chat_template
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert torch.equal(net(ids).logits, cli.model.model(ids).logits)


def test_lora_sft_exports_merged_weights(tmp_path):
    cli, out = _run(tmp_path, "--model.lora={r: 4, alpha: 8}")
    assert hasattr(cli.model.model, "merge_and_unload")  # the trained model keeps its adapters
    net, _ = load_policy(str(out))
    assert not any("lora" in n for n, _ in net.named_parameters())
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        torch.testing.assert_close(
            net(ids).logits, cli.model.model(ids).logits, rtol=1e-5, atol=1e-5
        )


def test_bad_sft_setting_is_one_line(tmp_path, capsys, monkeypatch):
    import sys

    from slca_lightning.cli.commands import script

    monkeypatch.setattr(
        sys,
        "argv",
        [
            "slca",
            "sft",
            "--config",
            str(ROOT / "configs/sft_smollm2.yaml"),
            "--model.learning_rate=-1",
        ],
    )
    with pytest.raises(SystemExit) as done:
        script()
    assert done.value.code == 2
    assert "learning_rate" in capsys.readouterr().err
