"""Offline test assets: tiny tokenizer and model builders."""

from slca_lightning.models.tiny import build_tiny_model, build_tiny_tokenizer

__all__ = ["build_tiny_model", "build_tiny_tokenizer"]
