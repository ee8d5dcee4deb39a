"""A model folder's digest covers its weights and tokenizer, not the package's own marker
files (which record where a folder came from), so the same shipped weights give the same
digest on every machine."""

from __future__ import annotations

from slca_lightning.cli.provenance import folder_digest


def test_the_same_weights_give_the_same_digest_whatever_the_marker_says(tmp_path):
    for name, origin in (("a", "/home/x/weights"), ("b", "/opt/y/weights")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"weights")
        (folder / "config.json").write_text('{"hidden_size": 8}')
        (folder / "slca_shipped_warm_start.json").write_text(f'{{"from": "{origin}"}}')
    assert folder_digest(tmp_path / "a") == folder_digest(tmp_path / "b")
    (tmp_path / "b" / "model.safetensors").write_bytes(b"other weights")
    assert folder_digest(tmp_path / "a") != folder_digest(tmp_path / "b")
