"""``slca export --checkpoint X --out DIR``: a ``slca fit`` checkpoint's policy as an HF folder.

The command around :func:`slca_lightning.models.export.export_policy`: it loads the checkpoint
through the evaluation runner's loader (trusted class paths, the run's saved config, the
frozen reference rebuilt) and writes the policy, LoRA merged, where ``--out`` says.
"""

from __future__ import annotations

import os
from typing import Any

from slca_lightning.models.export import export_policy

__all__ = ["build_parser", "main"]


def build_parser() -> Any:
    import argparse

    p = argparse.ArgumentParser(
        prog="slca export",
        description="Write the policy of a slca fit checkpoint as an HF folder (LoRA merged, "
        "tokenizer and chat template) that slca eval --model, transformers and vLLM load.",
    )
    p.add_argument("--checkpoint", required=True, help="a slca fit checkpoint (.ckpt)")
    p.add_argument("--out", required=True, help="the folder to write (replaced)")
    p.add_argument(
        "--config", help="the run's config.yaml (default: the one saved beside the checkpoint)"
    )
    from slca_lightning.cli.evaluate import add_trust_argument

    add_trust_argument(p)
    return p


def main(argv: list[str] | None = None) -> str:
    """``slca export``: checkpoint → folder; returns the folder."""
    from slca_lightning.cli.evaluate import find_run_config, load_module
    from slca_lightning.training.checkpoints import load_checkpoint

    args = build_parser().parse_args(argv)
    if not os.path.isfile(args.checkpoint):
        raise FileNotFoundError(f"checkpoint {args.checkpoint!r} does not exist")
    found = args.config is None
    config = find_run_config(args.checkpoint) if found else args.config
    trust = args.trust_class_prefix
    module = load_module(args.checkpoint, None, config, trust, found and config is not None)
    step = load_checkpoint(args.checkpoint, trust).get("global_step")
    info = {"from": os.path.abspath(args.checkpoint), "stage": "rl", "global_step": step}
    info["model"] = module.hparams.get("model")
    path = export_policy(module.policy, module.tokenizer, args.out, info)
    print(f"policy written to {path} (slca eval --model {path})")
    return path
