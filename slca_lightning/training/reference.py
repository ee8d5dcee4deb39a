"""Checkpoints without the frozen reference model.

The KL reference is the policy's starting weights, frozen: the same tensors the model
source (``model:``) gives every time it is loaded. Writing them into every checkpoint
doubles its model weights (0.54 GB a checkpoint for a 135M model in float32), so
:func:`drop_reference` removes the ``reference.*`` entries from a checkpoint's state dict and
records instead the model source and the SHA-256 of the reference's tensors
(:func:`weights_digest`). On load, :func:`restore_reference` puts the tensors of the
reference the module just rebuilt from that source back into the state dict after checking
that their digest is the recorded one, so a resumed run continues exactly; a source that
changed since (a folder overwritten, another warm start) is an error naming both digests,
never a silently different KL anchor. Checkpoints that hold their reference load as
before.
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["PREFIX", "RECORD", "drop_reference", "restore_reference", "weights_digest"]

#: The module attribute's prefix in a LightningModule state dict.
PREFIX = "reference."
#: The checkpoint key that records a dropped reference.
RECORD = "slca_reference"


def weights_digest(module: Any) -> str:
    """SHA-256 over ``module``'s state dict: names, dtypes, shapes and bytes, in name order."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        t = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}|{t.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def drop_reference(checkpoint: dict, source: str, digest: str) -> int:
    """Remove the ``reference.*`` entries of ``checkpoint["state_dict"]`` and record
    ``source`` and ``digest`` under :data:`RECORD`; return how many entries went."""
    state = checkpoint["state_dict"]
    keys = [k for k in state if k.startswith(PREFIX)]
    for key in keys:
        del state[key]
    if keys:
        checkpoint[RECORD] = {"model": source, "sha256": digest, "entries": len(keys)}
    return len(keys)


def restore_reference(checkpoint: dict, reference: Any) -> bool:
    """Put ``reference``'s tensors back into a checkpoint written by :func:`drop_reference`
    (True when it did; False for a checkpoint that holds its reference or has none).

    Raises:
        ValueError: the module has no reference to rebuild (``kl_coef`` 0, or LoRA, where
            the checkpoint's run had one), or the rebuilt reference is not the one the
            checkpoint's run trained against.
    """
    record = checkpoint.get(RECORD)
    state = checkpoint.get("state_dict", {})
    if not record or any(k.startswith(PREFIX) for k in state):
        return False
    if reference is None:
        raise ValueError(
            f"this checkpoint was written without its frozen reference (rebuilt from model "
            f"{record['model']!r} on load), but the module has no reference model: resume "
            "with the run's own kl_coef > 0 and no LoRA"
        )
    got = weights_digest(reference)
    if got != record["sha256"]:
        raise ValueError(
            f"the frozen reference rebuilt from model {record['model']!r} is not the one this "
            f"checkpoint trained against (weights sha256 {got[:16]}..., recorded "
            f"{record['sha256'][:16]}...): the model source changed since the run; restore it, "
            "or write checkpoints with model.save_reference: true"
        )
    for key, value in reference.state_dict().items():
        state[PREFIX + key] = value
    return True
