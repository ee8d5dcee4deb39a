"""Which tokens did RL make more or less likely? Teacher-forced held-out demonstrations.

Scores the reference demonstrations of the 64 RL held-out tasks (``SyntheticTasks(seed=0,
n_train=256)``, tasks 256-319) under the warm start and under an RL checkpoint's policy
(log-probs of the temperature-scaled policy, as the trainer scores them) and prints, per
token class of the assistant tokens (tool-call tags, end-of-turn after a call or after
text, JSON punctuation, numbers, other words), the mean change of log-probability, the
warm start's mean probability and the fraction that went down, then the largest drops.

    python experiments/learning/token_delta.py WARM_START_DIR RUN/checkpoints/X.ckpt
"""

from __future__ import annotations

import argparse
import collections
import math
import re

import torch

JSON_PUNCT = {
    '{"', '":', ' "', '",', '"}', "}}", "}", "{", ",", ":", '"', '"},', ' {"', "}]", '[{"', '", "',
}  # fmt: skip


def token_class(prev: str, tok: str) -> str:
    """The class of token ``tok`` (decoded) after ``prev``."""
    if tok.strip() in ("<tool_call>", "</tool_call>"):
        return "tag"
    if tok == "<|im_end|>":
        return "eot_after_call" if prev.strip() == "</tool_call>" else "eot_after_text"
    if re.fullmatch(r"\s*\d+", tok):
        return "number"
    return "json_punct" if tok.strip() in JSON_PUNCT else "word"


def main() -> None:
    from transformers import AutoModelForCausalLM

    from slca_lightning.data import SyntheticTaskGenerator, builtin_suite, reference_answer
    from slca_lightning.models.loading import load_tokenizer
    from slca_lightning.models.sft import build_sft_example

    ap = argparse.ArgumentParser()
    ap.add_argument("warm_start")
    ap.add_argument("checkpoint")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--worst", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(1)
    tok = load_tokenizer(args.warm_start)
    base = AutoModelForCausalLM.from_pretrained(args.warm_start).eval()
    rl = AutoModelForCausalLM.from_pretrained(args.warm_start).eval()
    state = torch.load(args.checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    policy = {k[len("policy.") :]: v for k, v in state.items() if k.startswith("policy.")}
    rl.load_state_dict(policy, strict=True)
    suite = builtin_suite()
    tasks = SyntheticTaskGenerator(0, suite=suite).generate(320)[256:320]
    by_class: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    drops = []
    for task in tasks:
        ids, mask = build_sft_example(tok, task.messages + reference_answer(task, suite))
        x = torch.tensor([ids])
        with torch.no_grad():
            lb = torch.log_softmax(base(x).logits[0, :-1] / args.temperature, -1)
            lr = torch.log_softmax(rl(x).logits[0, :-1] / args.temperature, -1)
        for i, t in enumerate(x[0, 1:].tolist()):
            if not mask[i + 1]:
                continue
            s, prev = tok.decode([t]), tok.decode([int(x[0, i])])
            d, b = float(lr[i, t] - lb[i, t]), float(lb[i, t])
            cls = token_class(prev, s)
            by_class[cls].append((d, b))
            drops.append((round(d, 3), cls, prev, s, round(math.exp(b), 4), task.task_id))
    print("| token class | n | mean Δ log p | warm-start mean p | fraction down |")
    print("|---|---|---|---|---|")
    for cls, rows in sorted(by_class.items()):
        ds = [d for d, _ in rows]
        p = sum(math.exp(b) for _, b in rows) / len(rows)
        down = sum(d < 0 for d in ds) / len(ds)
        print(f"| {cls} | {len(rows)} | {sum(ds) / len(ds):+.4f} | {p:.3f} | {down:.2f} |")
    for row in sorted(drops)[: args.worst]:
        print(row)


if __name__ == "__main__":
    main()
