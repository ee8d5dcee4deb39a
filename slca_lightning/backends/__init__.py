"""Chat backends: the one interface the simulator, the judge and the verifiers talk to.

:class:`ChatBackend` and the HTTP client :class:`OpenAIBackend` live here, on the floor
below everything that talks to a model. The backend that answers with a local model,
``EngineChatBackend``, runs on a rollout engine and so lives above it, in
:mod:`slca_lightning.rollout.engine_backend` (its old path
``slca_lightning.backends.engine`` still imports, see :mod:`slca_lightning.moved`).
"""

from slca_lightning.backends.base import CallableBackend, ChatBackend
from slca_lightning.backends.openai import ChatBackendError, OpenAIBackend
from slca_lightning.moved import alias

__all__ = [
    "CallableBackend",
    "ChatBackend",
    "ChatBackendError",
    "OpenAIBackend",
]

alias({"slca_lightning.backends.engine": "slca_lightning.rollout.engine_backend"})
