"""Chat backends: the one interface the simulator, the judge and the verifiers talk to."""

from slca_lightning.backends.base import CallableBackend, ChatBackend

__all__ = ["CallableBackend", "ChatBackend"]
