"""The built-in model names, with no imports: :mod:`.loading`, :mod:`.sources` and
:mod:`slca_lightning.cli.provenance` all resolve them."""

from __future__ import annotations

__all__ = ["BUILTIN_MODELS", "WARM_START_BASES", "warm_start_base"]

#: The built-in models :func:`load_policy` builds by name (each also as ``"<name>-sft"``).
BUILTIN_MODELS = ("tiny", "suite")
#: The built-in warm starts, each loaded as ``"<name>-sft"``: the built-in models after SFT,
#: and ``"suite-pooled"``, the suite model after SFT on pooled demonstrations
#: (:data:`slca_lightning.models.warm_start.WARM_STARTS` has one entry each).
WARM_START_BASES = (*BUILTIN_MODELS, "suite-pooled")


def warm_start_base(model: str) -> str | None:
    """The :data:`WARM_START_BASES` entry a built-in warm-start name loads (``"suite-sft"``
    → ``"suite"``), or None when ``model`` is not one."""
    base = model.removesuffix("-sft")
    return base if base != model and base in WARM_START_BASES else None
