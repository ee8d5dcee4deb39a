"""Chat backends: the one interface the simulator, the judge and the verifiers talk to.

:class:`ChatBackend` and the HTTP client :class:`OpenAIBackend` live here, on the floor
below everything that talks to a model. The backend that answers with a local model,
``EngineChatBackend``, runs on a rollout engine and so lives above it, in
:mod:`slca_lightning.rollout.engine_chat_backend`.
"""

from slca_lightning.chat_backends.base import CallableBackend, ChatBackend
from slca_lightning.chat_backends.openai import ChatBackendError, OpenAIBackend

__all__ = [
    "CallableBackend",
    "ChatBackend",
    "ChatBackendError",
    "OpenAIBackend",
]
