"""Our clipped-surrogate + k3 loss in ``grpo`` aggregation equals TRL 1.16.0's GRPO loss.

TRL's side is its real code path: a real ``GRPOTrainer`` is constructed offline around a
tiny ``Qwen2ForCausalLM`` built in code (saved to a temporary directory so that TRL can
load its reference model from it, as it does for a Hub id), with a word-level tokenizer
built in code. The loss is then ``GRPOTrainer._compute_loss(model, inputs)`` - the method
``compute_loss`` delegates to - fed the batch dictionary ``_prepare_inputs`` would produce
(``prompt_ids``/``prompt_mask`` left-padded, ``completion_ids``/``completion_mask``
right-padded, ``advantages`` ``[B]``, ``old_per_token_logps``, ``ref_per_token_logps``).
TRL computes the policy log-probabilities itself through the fused LM head it patches
into the model; we compute ours with :func:`token_logprobs` on the same model's logits.

The one attribute set by hand is ``current_gradient_accumulation_steps`` (= 1), which
``transformers.Trainer`` only sets inside its training loop and ``_compute_loss`` divides
by. Generation and reward scoring (``_generate_and_score_completions``) are bypassed:
the inputs are given directly.

Config choices needed for equality, each a real ``GRPOConfig`` field:

- ``loss_type="grpo"``: TRL 1.16's default is ``"dapo"``.
- ``use_bias_correction_kl=False``: TRL 1.16 defaults to multiplying the k3 term by the
  importance ratio; ours does not (see ``test_trl_default_bias_corrected_kl_differs``).
"""

from __future__ import annotations

import pytest
import torch

trl = pytest.importorskip("trl", reason="trl (dev extra) is needed for the TRL side-by-side check")
transformers = pytest.importorskip("transformers", reason="transformers is needed to build a model")

from slca_lightning.logprobs.chunked import token_logprobs  # noqa: E402
from slca_lightning.training.losses import policy_loss  # noqa: E402

# transformers' own TrainingArguments warns about a renamed field it sets itself
pytestmark = pytest.mark.filterwarnings("ignore:`gradient_checkpointing` is deprecated")

VOCAB = 64
PROMPT_LEN = 4
COMPLETION_LEN = 6
BATCH = 4


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="t1", eos_token="t2", unk_token="t0"
    )


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg)
    path = tmp_path_factory.mktemp("tiny_qwen2")
    model.save_pretrained(path)
    _tokenizer().save_pretrained(path)
    return path


def _trainer(model_dir, tmp_path, beta: float, bias_correction_kl: bool = False):
    from datasets import Dataset
    from transformers import Qwen2ForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(0)
    model = Qwen2ForCausalLM.from_pretrained(model_dir)  # config._name_or_path -> ref model
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=BATCH,
        num_generations=2,
        max_completion_length=COMPLETION_LEN,
        gradient_accumulation_steps=1,
        beta=beta,
        epsilon=0.2,
        loss_type="grpo",
        use_bias_correction_kl=bias_correction_kl,
        report_to=[],
        use_cpu=True,
        bf16=False,
        logging_strategy="no",
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **kwargs: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["t3 t4 t5"] * BATCH}),
        processing_class=_tokenizer(),
    )
    assert trainer.loss_type == "grpo" and trainer.beta == beta
    assert trainer.importance_sampling_level == "token"
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's training loop only
    trainer.model.train()
    return trainer


def _batch(seed: int, empty_row: bool = False):
    g = torch.Generator().manual_seed(seed)
    prompt_ids = torch.randint(3, VOCAB, (BATCH, PROMPT_LEN), generator=g)
    prompt_mask = torch.ones(BATCH, PROMPT_LEN, dtype=torch.long)
    prompt_mask[1, :2] = 0  # left padding, as TRL pads prompts
    prompt_ids[1, :2] = 1
    completion_ids = torch.randint(3, VOCAB, (BATCH, COMPLETION_LEN), generator=g)
    completion_mask = torch.ones(BATCH, COMPLETION_LEN, dtype=torch.long)
    completion_mask[0, 4:] = 0  # right padding after EOS
    completion_mask[2, 2:] = 0
    if empty_row:
        completion_mask[3] = 0
    completion_ids[completion_mask == 0] = 1
    advantages = torch.tensor([1.3, -0.7, 0.4, -1.1])
    return prompt_ids, prompt_mask, completion_ids, completion_mask, advantages, g


def _our_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask):
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # [B, P+C, V]
    # position t's logits score token t+1: the completion is scored by positions P-1 .. P+C-2
    return token_logprobs(logits[:, PROMPT_LEN - 1 : -1], completion_ids, chunk_size=5)


def _both_losses(trainer, seed: int, empty_row: bool = False):
    model = trainer.model
    p_ids, p_mask, c_ids, c_mask, adv, g = _batch(seed, empty_row)
    with torch.no_grad():
        current = _our_logprobs(model, p_ids, p_mask, c_ids, c_mask)
    # off-policy: perturb the old log-probs so that ratios move well past 1 ± 0.2
    old = current + 0.5 * torch.randn(current.shape, generator=g)
    ref = current + 0.3 * torch.randn(current.shape, generator=g)
    inputs = {
        "prompt_ids": p_ids,
        "prompt_mask": p_mask,
        "completion_ids": c_ids,
        "completion_mask": c_mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
    }

    model.zero_grad(set_to_none=True)
    trl_loss = trainer._compute_loss(model, inputs)
    trl_loss.backward()
    trl_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    model.zero_grad(set_to_none=True)
    logprobs = _our_logprobs(model, p_ids, p_mask, c_ids, c_mask)
    ours, metrics = policy_loss(
        logprobs,
        old,
        adv,
        c_mask.bool(),
        ref_logprobs=ref,
        kl_coef=trainer.beta,
        eps_low=trainer.epsilon_low,
        eps_high=trainer.epsilon_high,
        aggregation="grpo",
    )
    ours.backward()
    our_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return trl_loss, ours, trl_grads, our_grads, metrics


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_grpo_loss_matches_trl(model_dir, tmp_path, beta):
    trainer = _trainer(model_dir, tmp_path, beta)
    for seed in (0, 1):
        trl_loss, ours, trl_grads, our_grads, metrics = _both_losses(trainer, seed)
        # the perturbation must really clip on both sides, or the check is vacuous
        assert metrics["clip_frac_low"] > 0 and metrics["clip_frac_high"] > 0
        assert abs(metrics["ratio_mean"] - 1.0) > 1e-3
        assert abs(trl_loss.item() - ours.item()) <= 1e-6, (trl_loss.item(), ours.item())
        assert trl_grads.keys() == our_grads.keys()
        for name, grad in trl_grads.items():
            torch.testing.assert_close(our_grads[name], grad, atol=1e-6, rtol=1e-5, msg=name)

        logged = trainer._metrics["train"]
        assert metrics["clip_frac_low"] == pytest.approx(
            logged["clip_ratio/low_mean"][-1], abs=1e-7
        )
        assert metrics["clip_frac_high"] == pytest.approx(
            logged["clip_ratio/high_mean"][-1], abs=1e-7
        )
        assert metrics["clip_frac"] == pytest.approx(logged["clip_ratio/region_mean"][-1], abs=1e-7)
        if beta:
            assert metrics["kl_mean"] == pytest.approx(logged["kl"][-1], abs=1e-6)


def test_trl_default_bias_corrected_kl_differs(model_dir, tmp_path):
    """TRL's default multiplies k3 by the ratio; off-policy that changes the loss value."""
    trainer = _trainer(model_dir, tmp_path, beta=0.04, bias_correction_kl=True)
    trl_loss, ours, *_ = _both_losses(trainer, seed=0)
    assert abs(trl_loss.item() - ours.item()) > 1e-5


def test_trl_grpo_divides_by_all_rows_including_empty_ones(model_dir, tmp_path):
    """With a fully masked row, TRL's ``grpo`` averages over all B rows; ours over non-empty rows."""
    trainer = _trainer(model_dir, tmp_path, beta=0.04)
    trl_loss, ours, *_ = _both_losses(trainer, seed=0, empty_row=True)
    non_empty = BATCH - 1
    assert abs(trl_loss.item() - ours.item() * non_empty / BATCH) <= 1e-6
