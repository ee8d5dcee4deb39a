"""Moved to :mod:`slca_lightning.models.tiny` (kept so old imports keep working)."""

from slca_lightning.models.tiny import (  # noqa: F401
    ADDED_TOKENS,
    CHAT_TEMPLATE,
    SPECIAL_TOKENS,
    build_tiny_model,
    build_tiny_tokenizer,
)
