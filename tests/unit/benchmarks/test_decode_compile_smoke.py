"""benchmarks/decode_compile.py on the tiny model: its decode step is a real one (the
prompt copied into every row of the static cache gives the logits of a plain forward over
prompt + token), and an eager-only run writes its record. The compiled mode is not run
here (inductor's compile takes minutes on these cores)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks import decode_compile
from slca_lightning.models.policy import load_policy


def test_a_decode_step_on_the_copied_prompt_equals_a_plain_forward():
    model, _ = load_policy("tiny")
    model.eval()
    prompt = torch.arange(5, 17)
    cache = decode_compile.prefilled_cache(model, prompt, rows=3, max_len=16)
    token = torch.tensor([[7], [8], [9]])
    pos = torch.tensor([prompt.numel()])
    with torch.no_grad():
        step = model(input_ids=token, past_key_values=cache, use_cache=True,
                     cache_position=pos, position_ids=pos.expand(3, 1)).logits[:, -1]  # fmt: skip
        plain = model(input_ids=torch.cat([prompt.expand(3, -1), token], 1)).logits[:, -1]
    torch.testing.assert_close(step, plain, atol=1e-5, rtol=1e-4)


def test_eager_run_writes_its_record(tmp_path):
    out = tmp_path / "r.json"
    record = decode_compile.main(["--model", "tiny", "--rows", "4", "--prompt", "16",
                                  "--steps", "2", "--modes", "eager", "--json", str(out)])  # fmt: skip
    assert json.loads(out.read_text()) == record
    (mode,) = record["modes"]
    assert mode["mode"] == "eager" and mode["steps"] == 2 and mode["tokens_per_s"] > 0
    assert record["threads"] == 1 and "compiled_over_eager_speed" not in record
