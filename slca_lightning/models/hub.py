"""Hugging Face Hub model names: ``org/name`` (or ``org/name@revision``) as a snapshot folder.

:func:`slca_lightning.models.loading.load_model` takes a Hub repo id after the built-in
names, the named sources and local paths (a folder or a ``.gguf`` file that exists). The id
is resolved to a folder of the standard Hugging Face cache by huggingface_hub's own
:func:`~huggingface_hub.snapshot_download` (:func:`resolve_hub_model`): online it downloads
what transformers loads (the top-level config, tokenizer, chat-template and ``*.safetensors``
files, :data:`HUB_FILE_PATTERNS`; ``pytorch_model*.bin`` only for a repo without
safetensors), offline (``HF_HUB_OFFLINE=1``) it looks in the cache only
(``local_files_only``) and never opens a connection. Everything after that (transformers,
the chat template rule of :mod:`slca_lightning.models.chat`, vLLM, provenance hashing) reads
the snapshot folder, ``<cache>/models--org--name/snapshots/<commit>``.

The cache is the one huggingface_hub and transformers use (``HF_HUB_CACHE``, else
``HF_HOME/hub``, else ``~/.cache/huggingface/hub``), read from the environment when a model
is loaded (:func:`hub_cache_dir`), so a cache or offline switch set after import counts.
Every failure is one :class:`HubModelError` line naming the model and what to do: a gated
repo (log in, accept the license), a repo that does not exist (or is private), an unknown
revision, a model missing from the cache while offline or while the Hub cannot be reached.
"""

from __future__ import annotations

import logging
import os

__all__ = [
    "HUB_FILE_PATTERNS",
    "HUB_IGNORE_PATTERNS",
    "HubModelError",
    "cached_hub_folder",
    "hub_cache_dir",
    "hub_offline",
    "is_hub_id",
    "resolve_hub_model",
    "split_hub_id",
]

log = logging.getLogger(__name__)

#: The files of a Hub repo a download fetches: config, generation config, tokenizer
#: (``tokenizer.json``, ``vocab``/``merges``, sentencepiece ``*.model``, ``*.tiktoken``), the
#: chat template (``*.jinja``) and the safetensors weights with their index.
HUB_FILE_PATTERNS = ("*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.jinja")
#: Left out: anything in a subfolder (``original/``, ``metal/``, ``onnx/``: other formats of
#: the same weights) and Mistral's ``consolidated*`` copies of the weights.
HUB_IGNORE_PATTERNS = ("*/*", "consolidated*")
_BIN_PATTERNS = ("pytorch_model*.bin",)


class HubModelError(FileNotFoundError):
    """A Hugging Face Hub model that cannot be loaded; the message is one line naming the
    model and what to do (a ``FileNotFoundError``, so ``slca`` prints it as one line)."""


def split_hub_id(model: str) -> tuple[str, str | None] | None:
    """``(repo_id, revision)`` of ``"org/name"`` (revision None) or ``"org/name@revision"``;
    None when ``model`` is no Hub repo id (no namespace, a path such as ``./x``, ``~/x`` or
    ``a/b/c``, or characters the Hub refuses)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if not isinstance(model, str) or not model or model[0] in "./~" or "\\" in model:
        return None
    repo, at, revision = model.partition("@")
    if (at and not revision) or repo.count("/") != 1:
        return None
    try:
        validate_repo_id(repo)
    except HFValidationError:
        return None
    return repo, revision or None


def is_hub_id(model: str) -> bool:
    """True when ``model`` is written as a Hub repo id (:func:`split_hub_id`); says nothing
    about whether the repo exists."""
    return split_hub_id(model) is not None


def _is_true(value: str | None) -> bool:
    return (value or "").strip().upper() in ("1", "ON", "YES", "TRUE")


def hub_offline() -> bool:
    """True when Hub downloads are off: ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) set
    now, or huggingface_hub's own offline mode (the variables as they were at its import)."""
    from huggingface_hub import constants

    env = os.environ
    return _is_true(env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE")) or bool(
        constants.HF_HUB_OFFLINE
    )


def hub_cache_dir() -> str:
    """The Hugging Face Hub cache folder, from the environment as it is now, resolved the way
    huggingface_hub does: ``HF_HUB_CACHE``, ``HUGGINGFACE_HUB_CACHE``, ``HF_HOME/hub``,
    ``XDG_CACHE_HOME/huggingface/hub``, ``~/.cache/huggingface/hub``."""
    env = os.environ
    path = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if not path:
        default_home = os.path.join(os.path.expanduser("~"), ".cache")
        home = env.get("HF_HOME") or os.path.join(
            env.get("XDG_CACHE_HOME") or default_home, "huggingface"
        )
        path = os.path.join(home, "hub")
    return os.path.expandvars(os.path.expanduser(path))


def _snapshot(repo: str, revision: str | None, cache: str, offline: bool, patterns) -> str:
    from huggingface_hub import snapshot_download

    return snapshot_download(
        repo,
        revision=revision,
        cache_dir=cache,
        local_files_only=offline,
        allow_patterns=list(patterns),
        ignore_patterns=list(HUB_IGNORE_PATTERNS),
    )


def _has_safetensors(folder: str) -> bool:
    return any(name.endswith(".safetensors") for name in os.listdir(folder))


def _download(repo: str, revision: str | None, cache: str, offline: bool) -> str:
    from huggingface_hub import errors

    # huggingface_hub >= 2: a cached snapshot whose tree listing names files it lacks
    incomplete = getattr(errors, "IncompleteSnapshotError", None) or ()
    try:
        folder = _snapshot(repo, revision, cache, offline, HUB_FILE_PATTERNS)
    except incomplete as err:
        # a snapshot another tool downloaded in part (its own patterns): use it when it holds a
        # config; transformers names any file it still lacks
        folder = getattr(err, "snapshot_path", None)
        if not folder or not os.path.isfile(os.path.join(folder, "config.json")):
            raise
        log.warning("%s: using the partial cached snapshot %s (%s)", repo, folder, err)
    if not offline and not _has_safetensors(folder):  # an older repo: pytorch_model*.bin
        folder = _snapshot(repo, revision, cache, offline, HUB_FILE_PATTERNS + _BIN_PATTERNS)
    return folder


def _unreachable(model: str, cache: str, offline: bool, err: Exception) -> HubModelError:
    if offline:
        why = (
            "HF_HUB_OFFLINE is set: download it once with the Hub reachable (HF_HUB_OFFLINE "
            "unset), or point HF_HUB_CACHE (or HF_HOME) at a cache that holds it"
        )
    else:
        why = (
            f"the Hub cannot be reached ({type(err.__cause__ or err).__name__}): check the "
            "network or proxy, or fill the cache on a machine that can reach it"
        )
    return HubModelError(
        f"model {model!r} is no local path and is not in the Hugging Face cache at {cache}, "
        f"and {why}"
    )


def resolve_hub_model(model: str) -> str:
    """The local snapshot folder of the Hub model ``model`` (``"org/name"`` or
    ``"org/name@revision"``, a branch, tag or commit), downloaded into the Hugging Face cache
    (:func:`hub_cache_dir`) when it is not there yet, or looked up in the cache only when
    :func:`hub_offline`.

    Raises:
        HubModelError: ``model`` is no Hub repo id; the repo is gated, does not exist (or is
            private), has no such revision, or has no ``config.json``; or it is not cached
            and the Hub is off (``HF_HUB_OFFLINE``) or cannot be reached.
    """
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    parts = split_hub_id(model)
    if parts is None:
        raise HubModelError(f"model {model!r} is not a Hugging Face Hub id (org/name[@revision])")
    repo, revision = parts
    cache, offline = hub_cache_dir(), hub_offline()
    try:
        folder = _download(repo, revision, cache, offline)
    except GatedRepoError:  # before RepositoryNotFoundError: it is one
        raise HubModelError(
            f"model {model!r} is gated on the Hugging Face Hub: accept its license on "
            f"https://huggingface.co/{repo} and log in with that account (`hf auth login` or "
            "`huggingface-cli login`), or set HF_TOKEN to one of its access tokens"
        ) from None
    except RepositoryNotFoundError:
        raise HubModelError(
            f"model {model!r} is no local path and does not exist on the Hugging Face Hub (or "
            "it is private: log in with `hf auth login` or set HF_TOKEN); check the name, "
            "e.g. Qwen/Qwen2.5-0.5B-Instruct"
        ) from None
    except RevisionNotFoundError:
        raise HubModelError(
            f"model {model!r}: the Hugging Face Hub repo {repo!r} has no revision "
            f"{revision!r} (give a branch, a tag or a commit hash after '@')"
        ) from None
    except LocalEntryNotFoundError as err:
        raise _unreachable(model, cache, offline, err) from None
    except HfHubHTTPError as err:
        status = getattr(getattr(err, "response", None), "status_code", "?")
        raise HubModelError(
            f"model {model!r}: the Hugging Face Hub refused the download (HTTP {status}): "
            "check the name and your login (`hf auth login` or HF_TOKEN), or try again later"
        ) from None
    if not os.path.isfile(os.path.join(folder, "config.json")):
        raise HubModelError(
            f"model {model!r} on the Hugging Face Hub has no config.json (snapshot {folder}): "
            "not a transformers model; for a GGUF-only repo download its .gguf file and give "
            "that file's path"
        )
    log.info("model %s: Hugging Face snapshot %s", model, folder)
    return folder


def cached_hub_folder(model: str) -> str | None:
    """The snapshot folder ``model`` (a Hub id) resolves to in the cache, found without any
    network access (its ``config.json``), or None (not a Hub id, or not cached): for records
    such as provenance that must never download."""
    from huggingface_hub import try_to_load_from_cache

    parts = split_hub_id(model)
    if parts is None:
        return None
    repo, revision = parts
    found = try_to_load_from_cache(
        repo, "config.json", cache_dir=hub_cache_dir(), revision=revision
    )
    return os.path.dirname(found) if isinstance(found, str) else None
