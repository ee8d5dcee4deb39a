"""FSDP2 around the policy: sharding it (:func:`shard_fsdp2`) and keeping it gathered while
it samples rollouts (:func:`rollout_weights`)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import torch

from slca_lightning.models.loading import DTYPES

__all__ = ["rollout_weights", "shard_fsdp2"]


def shard_fsdp2(model: Any, mesh: Any, param_dtype: str | None = None) -> Any:
    """FSDP2: ``fully_shard`` every decoder layer, then the root, over ``mesh``.

    Used by the module's ``configure_model`` under Lightning's ``ModelParallelStrategy``,
    whose 2-D ``device_mesh`` is ``(data_parallel, tensor_parallel)``; the policy uses no
    tensor parallelism, so the mesh's dimensions of size > 1 are used for sharding: one of
    them gives plain FSDP over it, both give HSDP (replicas across the first, shards within the
    second: with Lightning's ``auto`` sizes, replicas across nodes and shards within a node).
    ``param_dtype`` (e.g. ``"bfloat16"``) turns on mixed precision with float32 gradient
    reduction. Works on CPU with gloo.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    names = mesh.mesh_dim_names or ()
    if mesh.ndim > 1 and names:
        big = [n for n in names if mesh[n].size() > 1]
        if len(big) == 1:
            mesh = mesh[big[0]]
        elif not big:
            mesh = mesh[names[0]]
    kw: dict[str, Any] = {"mesh": mesh}
    if param_dtype is not None:
        kw["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=DTYPES[param_dtype], reduce_dtype=torch.float32
        )
    layers = [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]
    for layer in layers:
        fully_shard(layer, **kw)
    return fully_shard(model, **kw)


@contextmanager
def rollout_weights(model: Any):
    """Keep an FSDP2-sharded ``model`` gathered while it samples rollouts (else a no-op).

    Ranks generate different prompts and so call ``forward`` a different number of times;
    FSDP2 would all-gather at every forward and hang. Gathering once (a collective every rank
    reaches) and keeping the weights unsharded makes generation rank-local.
    """
    from torch.distributed.fsdp import FSDPModule

    units = [] if model is None else [m for m in model.modules() if isinstance(m, FSDPModule)]
    if not units:
        yield
        return
    inner = [u for u in units if u is not model]  # the root never reshards after forward
    for unit in inner:
        unit.set_reshard_after_forward(False, recurse=False)
    for unit in units:
        unit.unshard()
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
        for unit in inner:
            unit.set_reshard_after_forward(True, recurse=False)
