"""The warm starts that ship inside the package (``slca_lightning/models/weights/``).

Each one loads without training and prints what it loaded, replays the greedy episodes its
manifest recorded on held-out tasks exactly, and its recipe's first steps give the recorded
losses; a missing or damaged weights file is one line naming the file, the expected sha256
and the command that rebuilds it.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from slca_lightning.cli.warm_start import RECORDED_TASKS, greedy_record
from slca_lightning.models import shipped, warm_start
from slca_lightning.models.names import warm_start_base
from slca_lightning.models.policy import load_policy

NAMES = ("suite-sft", "suite-pooled-sft")


def test_both_suite_warm_starts_ship_under_12_mb_with_a_complete_manifest():
    for name in NAMES:
        info = shipped.manifest(name)
        assert info is not None, f"{name} does not ship"
        path = shipped.WEIGHTS_DIR / info["file"]
        assert path.stat().st_size == info["bytes"] < 12e6
        assert shipped.file_sha256(path) == info["sha256"]
        assert info["command"] == f"slca warm-start {name}"
        for key in ("settings", "step", "curve", "loss_prefix", "train_seconds", "threads"):
            assert key in info, key
        assert info["torch"] and info["built"] and info["tokenizer_sha256"]
        # the step is the rule's: the lowest validation NLL of the curve, or the step of the
        # warm start whose rule it follows (the pooled one: the clean one's)
        step_of = info["settings"]["selection"].get("step_of")
        if step_of is None:
            best = min(info["curve"], key=lambda p: p["validation_nll"])
            assert info["step"] == best["step"] and info["rule"] == "lowest validation NLL"
        else:
            assert info["step"] == shipped.manifest(step_of)["step"]


@pytest.mark.parametrize("name", NAMES)
def test_loading_a_shipped_warm_start_never_trains_and_says_what_it_loaded(
    name, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("SLCA_CACHE", str(tmp_path))
    monkeypatch.setattr(shipped, "_SAID", set())  # said once per process: as in a fresh one

    def no_training(*args, **kwargs):
        raise AssertionError("a shipped warm start must not train")

    monkeypatch.setattr(warm_start, "train_warm_start", no_training)
    _, tokenizer = load_policy(name)
    said = capsys.readouterr().err
    info = shipped.manifest(name)
    assert said.count(f"warm start {name}: shipped weights") == 1
    assert f"warm start {name}: shipped weights {info['file']}" in said
    assert f"SFT step {info['step']} of" in said and "nothing trained" in said
    assert shipped.tokenizer_digest(tokenizer) == info["tokenizer_sha256"]
    folder = warm_start.warm_start(base=warm_start_base(name))
    assert folder.startswith(str(tmp_path)) and "shipped" in folder


@pytest.mark.parametrize("name", NAMES)
def test_a_shipped_warm_start_replays_its_recorded_greedy_episodes_exactly(
    name, tmp_path, monkeypatch
):
    monkeypatch.setenv("SLCA_CACHE", str(tmp_path))
    recorded = shipped.manifest(name)["recorded_greedy"]
    model, tokenizer = load_policy(name)
    torch.manual_seed(0)
    replay = greedy_record(model, tokenizer, 256, RECORDED_TASKS, texts=True)
    assert replay == recorded


@pytest.mark.parametrize("name", NAMES)
def test_the_recipes_first_steps_reproduce_the_recorded_losses(name):
    recorded = shipped.manifest(name)["loss_prefix"][:3]
    run = warm_start.train_warm_start(warm_start_base(name), max_steps=3)
    assert run.losses == pytest.approx(recorded, rel=1e-5)


def test_a_missing_or_damaged_weights_file_is_one_line_naming_file_sha_and_command(tmp_path):
    info = shipped.manifest("suite-pooled-sft")
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "suite-pooled-sft.json").write_text(json.dumps(info))
    with pytest.raises(shipped.ShippedWeightsError) as missing:
        shipped.shipped_folder("suite-pooled-sft", str(tmp_path / "cache"), weights)
    text = str(missing.value)
    assert "\n" not in text and str(weights / info["file"]) in text
    assert info["sha256"] in text and "slca warm-start suite-pooled-sft" in text
    assert "missing" in text
    damaged = weights / info["file"]
    shutil.copy(shipped.WEIGHTS_DIR / info["file"], damaged)
    with open(damaged, "r+b") as fh:  # flip one byte of the weights
        fh.seek(-7, 2)
        byte = fh.read(1)
        fh.seek(-7, 2)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(shipped.ShippedWeightsError) as bad:
        shipped.shipped_folder("suite-pooled-sft", str(tmp_path / "cache"), weights)
    text = str(bad.value)
    assert "\n" not in text and "damaged" in text and info["sha256"] in text
    assert "slca warm-start suite-pooled-sft" in text
