"""BFCLEval callback and the standalone command, end to end with the tiny model.

Real parts: BFCL's data and checker, the tiny Qwen2 + tokenizer, ``HFEngine`` generation, a
real ``lightning.Trainer`` (``validate`` and a 2-step ``fit``) with a ``CSVLogger``. The
LightningModule is a small harness holding ``policy`` and ``tokenizer`` (all the callback
reads), standing in for ``SLCAGRPOModule``, whose full fit is covered elsewhere.
"""

import csv
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

from callbacks import BFCLEval
from slca_lightning.eval.bfcl.data import CATEGORIES, MULTI_TURN_CATEGORIES, load_category
from slca_lightning.eval.bfcl.evaluator import BFCLEvaluator, main
from slca_lightning.models.policy import load_policy


class Harness(L.LightningModule):
    """Holds the policy and tokenizer; one trivial loss so ``fit`` can step."""

    def __init__(self):
        super().__init__()
        self.policy, self.tokenizer = load_policy("tiny")
        self.policy.requires_grad_(False)
        self.w = torch.nn.Parameter(torch.zeros(1))

    def training_step(self, batch, batch_idx):
        return (self.w - 1.0).pow(2).sum()

    def validation_step(self, batch, batch_idx):
        return None

    def configure_optimizers(self):
        return torch.optim.SGD([self.w], lr=0.1)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.zeros(4, 1), batch_size=1)

    def val_dataloader(self):
        return torch.utils.data.DataLoader(torch.zeros(1, 1), batch_size=1)


@pytest.fixture(scope="module")
def harness():
    return Harness()


def _trainer(tmp_path, cb, **kw):
    return L.Trainer(
        accelerator="cpu",
        logger=CSVLogger(str(tmp_path)),
        callbacks=[cb],
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        **kw,
    )


def _logged(trainer) -> list[dict]:
    with open(Path(trainer.logger.log_dir) / "metrics.csv") as f:
        return list(csv.DictReader(f))


def test_validate_runs_every_category_and_writes_the_table(tmp_path, harness):
    cb = BFCLEval(categories="all", samples_per_category=2, max_new_tokens=12, batch_size=13)
    trainer = _trainer(tmp_path, cb)
    trainer.validate(harness)
    table = (Path(trainer.log_dir) / "eval" / "bfcl.md").read_text()
    for cat in CATEGORIES:
        assert f"| {cat} | 2 |" in table
    assert "**overall**" in table and "**live_ast**" in table
    m = cb.last
    assert set(CATEGORIES) <= set(m) and {"non_live_ast", "live_ast", "overall"} <= set(m)
    # An untrained tiny model writes no valid call: AST categories fail, irrelevance passes.
    assert m["irrelevance"] == 1.0 and m["simple_python"] == 0.0
    assert m["overall"] == pytest.approx((m["non_live_ast"] + m["live_ast"] + 1.0) / 3)
    rows = _logged(trainer)
    assert float(next(r for r in rows if r.get("bfcl/overall"))["bfcl/overall"]) == m["overall"]


def test_fit_evaluates_every_n_steps_and_at_the_end(tmp_path, harness, monkeypatch):
    cb = BFCLEval(categories="simple_python,irrelevance", samples_per_category=2,
                  max_new_tokens=8, every_n_steps=2)  # fmt: skip
    steps = []
    real = cb.evaluate
    monkeypatch.setattr(cb, "evaluate", lambda t, m: steps.append(t.global_step) or real(t, m))
    trainer = _trainer(tmp_path, cb, max_steps=3, limit_val_batches=0)
    trainer.fit(harness)
    assert steps == [2, 3]  # every 2 optimizer steps, then at the end of fit
    assert (Path(trainer.log_dir) / "eval" / "bfcl.md").read_text().startswith("# BFCL (step 3)")


def test_generation_outputs_are_scored(harness):
    ev = BFCLEvaluator("simple_python", limit=2, max_new_tokens=10, max_prompt_tokens=10_000)
    entries = ev.entries()
    outputs = ev.generate(entries, harness.policy, harness.tokenizer)
    assert all(isinstance(o, str) and o for o in outputs)  # something was generated
    short = BFCLEvaluator("simple_python", limit=2, max_prompt_tokens=5)
    report = short.run(harness.policy, harness.tokenizer)
    assert report.stats["prompt_too_long"] == 2 and report.accuracy["simple_python"] == 0.0
    assert {s.error_type for s in report.scores} == {"prompt_too_long"}


def test_prompt_shows_tools_through_the_chat_template(harness):
    tok = harness.tokenizer
    entry = load_category("multiple", limit=1)[0]
    ev = BFCLEvaluator("multiple", tool_prompt="template")
    text = ev.prompt_text(entry, tok)
    for fn in entry.functions:
        assert f'"name": "{fn["name"]}"' in text
    assert '"type": "object"' in text and '"type": "dict"' not in text  # JSON-schema types
    assert text.endswith("<|im_start|>assistant\n") and ev.stats["tool_prompt_fallback"] == 0
    system = BFCLEvaluator("multiple", tool_prompt="system").prompt_text(entry, tok)
    assert "<tools>" in system and "<tool_call></tool_call> XML tags" in system


def test_template_without_tools_falls_back_to_the_hermes_prompt(harness):
    tok = harness.tokenizer
    saved = tok.chat_template
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    try:
        entry = load_category("simple_python", limit=1)[0]
        ev = BFCLEvaluator("simple_python")
        text = ev.prompt_text(entry, tok)
    finally:
        tok.chat_template = saved
    assert entry.functions[0]["name"] in text and "<tools>" in text
    assert ev.stats["tool_prompt_fallback"] == 1


def test_command_with_oracle_writes_report(tmp_path, capsys):
    out = tmp_path / "report.md"
    report = main(["--model", "oracle", "--categories", "ast", "--limit", "20", "--out", str(out)])
    assert report.summary["overall"] >= 0.98
    text = out.read_text()
    assert "| simple_java | 20 |" in text and "**overall**" in text
    assert "| simple_python |" in capsys.readouterr().out
    with pytest.raises(ValueError, match="unknown BFCL category"):
        main(["--model", "oracle", "--categories", "simple_cobol"])


def test_command_with_tiny_model(tmp_path):
    out = tmp_path / "tiny.md"
    argv = ["--model", "tiny", "--categories", "parallel", "live_irrelevance", "--limit", "2"]
    report = main([*argv, "--max-new-tokens", "8", "--out", str(out)])
    assert report.counts == {"parallel": 2, "live_irrelevance": 2}
    assert "# BFCL (tiny)" in out.read_text()


def test_shipped_component_config_instantiates():
    import yaml
    from jsonargparse import ArgumentParser

    root = Path(__file__).resolve().parents[3]
    spec = yaml.safe_load((root / "configs/components/bfcl_eval.yaml").read_text())["bfcl_eval"]
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--cb", type=L.Callback)
    cb = parser.instantiate_classes(parser.parse_object({"cb": spec})).cb
    assert isinstance(cb, BFCLEval) and cb.every_n_steps == 50
    assert cb.evaluator.categories == list(CATEGORIES) and cb.evaluator.limit == 20


@pytest.mark.slow
def test_multi_turn_through_the_tiny_model(tmp_path, harness):
    """~15 s on CPU: multi-turn prompts carry ~30 backend functions (13k tiny tokens)."""
    cb = BFCLEval(categories="multi_turn_base,simple_python", samples_per_category=1,
                  max_new_tokens=8)  # fmt: skip
    trainer = _trainer(tmp_path, cb)
    trainer.validate(harness)
    assert cb.last["multi_turn_base"] == 0.0 and "multi_turn" in cb.last
    table = (Path(trainer.log_dir) / "eval" / "bfcl.md").read_text()
    assert (
        "| multi_turn_base | 1 | 0 |" in table and "multi_turn:empty_turn_model_response" in table
    )


def test_oracle_command_covers_multi_turn(tmp_path):
    report = main(["--model", "oracle", "--categories", "multi_turn", "--limit", "3"])
    assert report.accuracy == {c: 1.0 for c in MULTI_TURN_CATEGORIES}
    assert report.summary["multi_turn"] == 1.0
