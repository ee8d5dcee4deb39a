"""Chat backends: the one interface the simulator, the judge and the verifiers talk to."""

from slca_lightning.backends.base import CallableBackend, ChatBackend
from slca_lightning.backends.openai import ChatBackendError, OpenAIBackend


def __getattr__(name: str):
    # EngineChatBackend imports the rollout package, which imports the tools that import
    # this package: resolve it lazily to keep the import graph one-way.
    if name == "EngineChatBackend":
        from slca_lightning.backends.engine import EngineChatBackend

        return EngineChatBackend
    raise AttributeError(name)


__all__ = [
    "CallableBackend",
    "ChatBackend",
    "ChatBackendError",
    "EngineChatBackend",
    "OpenAIBackend",
]
