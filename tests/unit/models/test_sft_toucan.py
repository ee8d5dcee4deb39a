"""SFT warm start on Toucan-1.5M SFT rows: SFTDataModule(toucan_sft_path=...).

Real parts: the fixture rows in the released SFT format (tests/fixtures/README.md), the
project's offline tiny tokenizer and model, SFTModule and a Lightning Trainer. Nothing is
mocked.
"""

from __future__ import annotations

import json
from pathlib import Path

import lightning
import pytest
import torch

from slca_lightning.data.toucan_sft import ToucanSFTFormatError, load_toucan_sft, sft_messages
from slca_lightning.models.sft import SFTDataModule, SFTModule
from slca_lightning.models.tiny import build_tiny_tokenizer

ROWS = Path(__file__).resolve().parents[2] / "fixtures" / "toucan_sft_sample.jsonl"


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def masked_runs(tok, ids, mask):
    runs, cur = [], []
    for i, m in zip(ids, mask, strict=True):
        if m:
            cur.append(i)
        elif cur:
            runs.append(cur)
            cur = []
    return [tok.decode(r) for r in [*runs, cur] if r]


def test_toucan_rows_become_examples_with_assistant_only_loss_masks(tok):
    dm = SFTDataModule(tok, n_tasks=0, toucan_sft_path=str(ROWS), group_by_prompt=False)
    dm.setup()
    rows = load_toucan_sft(ROWS)
    assert len(dm.examples) == len(rows) == 3
    for (ids, mask), row in zip(dm.examples, rows):
        chat = sft_messages(row)
        assistant = [m["content"] + "<|im_end|>" for m in chat if m["role"] == "assistant"]
        assert masked_runs(tok, ids, mask) == assistant  # nothing else is trained on
        full = tok.apply_chat_template(chat, tokenize=False)
        assert ids == tok.encode(full, add_special_tokens=False)
        untrained = tok.decode([i for i, m in zip(ids, mask) if not m])
        for role, payload in row.turns:
            if role in ("user", "tool_response"):
                assert payload in untrained
    calls = masked_runs(tok, *dm.examples[0])[0]
    assert calls.startswith("I will compute both at once.\n<tool_call>")
    assert calls.count("<tool_call>") == 2 and '"arguments": {"a": 4, "b": 5}' in calls
    assert "it's done" in masked_runs(tok, *dm.examples[1])[0]  # the Python-literal call
    mixed = SFTDataModule(tok, n_tasks=4, toucan_sft_path=str(ROWS))
    mixed.setup()
    assert len(mixed.examples) == 7 and len(set(mixed.keys)) >= 4  # one key per tool list
    short = SFTDataModule(tok, n_tasks=0, toucan_sft_path=str(ROWS), max_tokens=600)
    short.setup()
    lengths = [len(ids) for ids, _ in dm.examples]
    assert short.skipped == sum(n > 600 for n in lengths) > 0 and short.skipped < 3


def test_toucan_rows_train_a_step(tok, tmp_path):
    dm = SFTDataModule(n_tasks=0, toucan_sft_path=str(ROWS), batch_size=3, seed=0)
    module = SFTModule(learning_rate=1e-2, warmup_steps=0, share_prefix=0)
    trainer = lightning.Trainer(
        accelerator="cpu", max_steps=2, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
    )  # fmt: skip
    module.configure_model()
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    dm.connect(module.tokenizer)
    dm.setup()
    batch = next(iter(dm.train_dataloader()))
    assert (batch["loss_mask"] <= batch["attention_mask"]).all() and batch["loss_mask"].any()
    start = module.loss(batch)["nll"].item()
    trainer.fit(module, datamodule=dm)
    assert trainer.global_step == 2
    assert trainer.callback_metrics["sft/tokens"] > 0
    assert torch.isfinite(trainer.callback_metrics["sft/loss"])
    changed = [n for n, p in module.named_parameters() if not torch.equal(p, before[n])]
    assert len(changed) == len(before)  # every trainable parameter moved
    assert module.loss(batch)["nll"].item() < start


def write_rows(tmp_path, *rows):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def good_row():
    return json.loads(ROWS.read_text().splitlines()[1])


@pytest.mark.parametrize(
    "change, where",
    [
        ({"messages": "[{'role': 'user'"}, "field messages: not valid JSON"),
        ({"tools": json.dumps({"name": "x"})}, "field tools: expected a list"),
        (
            {"messages": json.dumps([{"role": "tool_call", "content": "{'name': 'f',"}])},
            r"field messages\[0\]\.content: not a Python/JSON literal",
        ),
        (
            {"messages": json.dumps([{"role": "user", "content": "hi"}])},
            "field messages: no assistant or tool_call message to train on",
        ),
    ],
)
def test_malformed_rows_name_file_line_and_field(tok, tmp_path, change, where):
    path = write_rows(tmp_path, good_row(), {**good_row(), **change})
    dm = SFTDataModule(tok, n_tasks=0, toucan_sft_path=path)
    with pytest.raises(ToucanSFTFormatError, match=rf"rows\.jsonl, line 2, {where}"):
        dm.setup()


def test_no_demonstrations_is_a_clear_error(tok):
    with pytest.raises(ValueError, match="no demonstrations"):
        SFTDataModule(tok, n_tasks=0).setup()
