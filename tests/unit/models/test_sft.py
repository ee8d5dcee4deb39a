"""sft.py: loss masks from prefix renders, the data module, the SFT LightningModule."""

import copy

import lightning
import pytest
import torch
from torch.utils.data import DataLoader

from slca_lightning.data import SyntheticTaskGenerator, reference_answer
from slca_lightning.logprobs.causal_lm import (
    common_prefix_len,
    sequence_logprobs,
    shared_prefix_logprobs,
)
from slca_lightning.models.lora import LoraSettings
from slca_lightning.models.sft import (
    SFTDataModule,
    SFTModule,
    TemplateRewriteError,
    build_sft_example,
)
from slca_lightning.models.tiny import build_tiny_tokenizer

SHORT = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Add 2 and 3."},
    {
        "role": "assistant",
        "content": '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>',
    },
    {"role": "tool", "content": '{"result": 5}'},
    {"role": "assistant", "content": "The sum of 2 and 3 is 5."},
]


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


@pytest.mark.parametrize("which", ["short", "synthetic-multistep", "synthetic-irrelevant"])
def test_loss_mask_is_assistant_content_plus_eos(tok, which):
    if which == "short":
        messages = SHORT
    else:
        kind = which.split("-")[1]
        tasks = SyntheticTaskGenerator(0).generate(40)
        task = next(t for t in tasks if t.metadata["kind"] == kind)
        messages = task.messages + reference_answer(task)
    ids, mask = build_sft_example(tok, messages)
    assert len(ids) == len(mask)
    assistant = [m["content"] + "<|im_end|>" for m in messages if m["role"] == "assistant"]
    assert masked_runs(tok, ids, mask) == assistant
    full = tok.apply_chat_template(messages, tokenize=False)
    assert tok.decode(ids) == full  # unmasked tokens are exactly the rest of the render
    assert ids == tok.encode(full, add_special_tokens=False)


def test_template_agnostic_and_rewrite_error(tok):
    other = copy.deepcopy(tok)  # a template that closes turns with "[END]", not eos
    other.chat_template = (
        "{% for m in messages %}### {{ m.role }}: {{ m.content }} [END]\n{% endfor %}"
        "{% if add_generation_prompt %}### assistant: {% endif %}"
    )
    ids, mask = build_sft_example(other, SHORT)
    assert masked_runs(other, ids, mask) == [
        m["content"] for m in SHORT if m["role"] == "assistant"
    ]
    other.chat_template = (  # drops past assistant turns, as some reasoning templates do
        "{% for m in messages %}{% if m.role != 'assistant' or loop.last %}"
        "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    with pytest.raises(TemplateRewriteError, match="rewrites history"):
        build_sft_example(other, SHORT)


def test_datamodule_batches(tok):
    with pytest.raises(RuntimeError, match="tokenizer"):
        SFTDataModule(n_tasks=4).train_dataloader()
    dm = SFTDataModule(n_tasks=12, batch_size=3, seed=0)
    dm.connect(tok)
    batches = list(dm.train_dataloader())
    assert sum(len(b["input_ids"]) for b in batches) == 12
    tasks = SyntheticTaskGenerator(0).generate(12)
    for b in batches:
        ids, attn, loss = b["input_ids"], b["attention_mask"], b["loss_mask"]
        assert ids.dtype == torch.long and attn.dtype == loss.dtype == torch.bool
        assert not (loss & ~attn).any() and (ids[~attn] == tok.pad_token_id).all()
        lengths = attn.sum(1)
        assert all(attn[r, : lengths[r]].all() for r in range(len(ids)))  # right-padded
        assert len(ids) == 1 or common_prefix_len(ids, attn) > 300  # one system prompt a batch
    again = list(SFTDataModule(tok, n_tasks=12, batch_size=3).train_dataloader())
    assert all(torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(batches, again))
    assert len({t.messages[0]["content"] for t in tasks}) > 1


def short_batch(tok, n=2):
    dm = SFTDataModule(tok)
    rows = [build_sft_example(tok, SHORT)] * n
    return dm.collate(rows)


def test_loss_is_mean_nll_over_mask(tok):
    module = SFTModule(share_prefix=0)
    module.configure_model()
    batch = short_batch(tok)
    out = module.loss(batch)
    logp = sequence_logprobs(module.model, batch["input_ids"], batch["attention_mask"])
    mask = batch["loss_mask"]
    torch.testing.assert_close(out["nll"], -logp[mask].mean())
    assert out["tokens"] == mask.sum() and torch.equal(out["loss"], out["nll"])
    shared = SFTModule(share_prefix=8)
    shared.model, shared.tokenizer = module.model, module.tokenizer
    torch.testing.assert_close(shared.loss(batch)["nll"], out["nll"], atol=1e-5, rtol=0)
    weighted = SFTModule(context_weight=0.5)
    weighted.model = module.model
    w = weighted.loss(batch)
    torch.testing.assert_close(w["loss"], w["nll"] + 0.5 * w["context_nll"])


def test_three_step_fit_lowers_loss(tok):
    module = SFTModule(learning_rate=1e-2, warmup_steps=0)
    module.configure_model()
    batch = short_batch(tok)
    before = module.loss(batch)["nll"].item()
    rows = [build_sft_example(tok, SHORT)] * 2
    loader = DataLoader(rows * 3, batch_size=2, collate_fn=SFTDataModule(tok).collate)
    trainer = lightning.Trainer(
        accelerator="cpu", max_steps=3, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(module, train_dataloaders=loader)
    assert trainer.global_step == 3
    assert {"sft/loss", "sft/tokens"} <= set(trainer.callback_metrics)
    assert module.loss(batch)["nll"].item() < before - 0.1


def test_lora_module_trains_only_adapters():
    module = SFTModule(lora=LoraSettings(r=4))
    module.configure_model()
    opt = module.configure_optimizers()["optimizer"]
    params = [p for g in opt.param_groups for p in g["params"]]
    names = {id(p): n for n, p in module.named_parameters()}
    assert params and all("lora_" in names[id(p)] for p in params)


def test_gradient_checkpointing_gives_the_same_loss_and_gradients(tok):
    """Checkpointed layers in train mode (no KV cache, so rows that share a prefix are
    scored plainly): the loss and every gradient equal the plain model's."""
    plain = SFTModule(share_prefix=8, seed=1)
    plain.configure_model()
    ckpt = SFTModule(share_prefix=8, seed=1, gradient_checkpointing=True)
    ckpt.configure_model()
    batch = short_batch(tok, n=3)
    assert common_prefix_len(batch["input_ids"], batch["attention_mask"]) >= 8
    grads = []
    for module in (plain, ckpt):
        module.model.train()
        out = module.loss(batch)
        out["loss"].backward()
        grads.append({n: p.grad.clone() for n, p in module.model.named_parameters()})
        grads[-1]["loss"] = out["loss"].detach()
    assert ckpt.model.is_gradient_checkpointing
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, rtol=1e-4, atol=1e-6, msg=name)
    # called directly, shared-prefix scoring falls back to plain scoring without a cache
    ids, am = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        shared = shared_prefix_logprobs(ckpt.model, ids, am, 8)
        torch.testing.assert_close(shared, sequence_logprobs(ckpt.model, ids, am))


def test_a_model_loaded_from_a_folder_trains_in_train_mode(tmp_path):
    """from_pretrained returns eval mode; Lightning checks the mode before on_train_start."""
    from slca_lightning.models.policy import load_policy

    net, tokenizer = load_policy("tiny")
    net.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    module = SFTModule(model=str(tmp_path))
    module.configure_model()
    assert all(m.training for m in module.model.modules())
