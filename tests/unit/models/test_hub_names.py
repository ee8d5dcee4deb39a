"""Hugging Face Hub model names (``org/name``, ``org/name@revision``) load through the HF cache.

No test touches the network: an autouse fixture makes every socket connection fail and sets
``HF_HUB_OFFLINE=1``, and each test builds its own Hub cache under ``tmp_path``. The cache
is laid out as huggingface_hub writes one (``huggingface_hub.file_download.repo_folder_name``
names the repo folder; ``blobs/<sha256>`` holds each file's bytes, ``snapshots/<commit>/<file>``
is a relative symlink to its blob, ``refs/<branch or tag>`` holds the commit with no newline),
filled from the built-in tiny model saved with ``save_pretrained``; ``scan_cache_dir`` and
``try_to_load_from_cache`` read it back as a valid cache before anything is loaded from it.
"""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

import pytest
import torch

from slca_lightning.models.hub import (
    HubModelError,
    cached_hub_folder,
    hub_cache_dir,
    split_hub_id,
)
from slca_lightning.models.loading import load_model
from slca_lightning.models.policy import load_policy

ROOT = Path(__file__).resolve().parents[3]
REPO = "testorg/tiny-model"
MAIN = "a" * 40  # the commit refs/main points at
OTHER = "b" * 40  # a second commit, tagged v1 and reachable by its hash


@pytest.fixture(autouse=True)
def no_network(monkeypatch, tmp_path):
    """Every connection attempt fails loudly; the Hub is off; HF_HOME is a fresh folder."""

    def refuse(*args, **kwargs):
        raise AssertionError("a Hub test tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)


def save_tiny(folder: Path, seed: int) -> dict[str, torch.Tensor]:
    """Save the built-in tiny model (initialised from ``seed``) and its tokenizer as an HF
    folder; return its weights."""
    net, tok = load_model("tiny", seed=seed)
    net.save_pretrained(folder)
    tok.save_pretrained(folder)
    return {k: v.clone() for k, v in net.state_dict().items()}


def add_snapshot(cache: Path, repo: str, folder: Path, commit: str, refs=("main",)) -> Path:
    """Lay ``folder``'s files out as the snapshot ``commit`` of ``repo`` in the Hub cache
    ``cache`` (blobs, relative symlinks, refs), as ``snapshot_download`` leaves them."""
    from huggingface_hub.file_download import repo_folder_name

    storage = cache / repo_folder_name(repo_id=repo, repo_type="model")
    snapshot = storage / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (storage / "blobs").mkdir(exist_ok=True)
    for f in sorted(folder.iterdir()):
        data = f.read_bytes()
        blob = hashlib.sha256(data).hexdigest()  # the blob name of an LFS file
        (storage / "blobs" / blob).write_bytes(data)
        (snapshot / f.name).symlink_to(Path("..", "..", "blobs", blob))
    for ref in refs:
        (storage / "refs").mkdir(exist_ok=True)
        (storage / "refs" / ref).write_text(commit)  # read back verbatim: no newline
    return snapshot


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """A Hub cache holding ``testorg/tiny-model``: ``main`` (tiny, seed 0) and ``v1`` (seed 1),
    pointed at by ``HF_HUB_CACHE``; yields ``(cache, {commit: weights})``."""
    cache = tmp_path / "hub"
    weights = {}
    for commit, seed, refs in ((MAIN, 0, ("main",)), (OTHER, 1, ("v1",))):
        saved = tmp_path / f"saved-{seed}"
        weights[commit] = save_tiny(saved, seed)
        add_snapshot(cache, REPO, saved, commit, refs)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache, weights


def same_weights(net, expected: dict[str, torch.Tensor]) -> bool:
    state = net.state_dict()
    return state.keys() == expected.keys() and all(
        torch.equal(state[k], expected[k]) for k in expected
    )


def spy_snapshot_download(monkeypatch) -> list[dict]:
    """Record every ``snapshot_download`` call's keyword arguments (the real one still runs)."""
    import huggingface_hub

    real, calls = huggingface_hub.snapshot_download, []

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", spy)
    return calls


def test_the_test_cache_is_a_valid_hub_cache(hub_cache):
    """huggingface_hub itself reads the hand-made cache: both revisions, their refs, no
    warnings, and ``config.json`` found through ``refs/main``."""
    from huggingface_hub import scan_cache_dir, try_to_load_from_cache

    cache, _ = hub_cache
    assert hub_cache_dir() == str(cache)
    info = scan_cache_dir(cache)
    assert not info.warnings
    (repo,) = info.repos
    assert repo.repo_id == REPO and repo.repo_type == "model"
    refs = {rev.commit_hash: set(rev.refs) for rev in repo.revisions}
    assert refs == {MAIN: {"main"}, OTHER: {"v1"}}
    found = try_to_load_from_cache(REPO, "config.json", cache_dir=cache)
    assert found == str(cache / "models--testorg--tiny-model/snapshots" / MAIN / "config.json")


def test_hub_id_loads_the_cached_snapshot_offline(hub_cache, monkeypatch):
    """``load_model("testorg/tiny-model")`` offline: the main snapshot's weights, a working
    tokenizer, read from the snapshot folder, and the cache only asked (local_files_only)."""
    cache, weights = hub_cache
    calls = spy_snapshot_download(monkeypatch)
    net, tok = load_model(REPO)
    assert same_weights(net, weights[MAIN])
    assert net.config._name_or_path == str(cache / "models--testorg--tiny-model/snapshots" / MAIN)
    assert tok.pad_token is not None and tok.padding_side == "right"
    _, built = load_model("tiny")
    text = "call add(a=2, b=3)"
    assert tok(text)["input_ids"] == built(text)["input_ids"]
    assert calls and all(c["local_files_only"] for c in calls)
    assert all(c["cache_dir"] == str(cache) for c in calls)


def test_load_policy_takes_a_hub_id_with_dtype(hub_cache):
    _, weights = hub_cache
    net, tok = load_policy(REPO)
    assert same_weights(net, weights[MAIN]) and tok.pad_token is not None
    assert load_policy(REPO, dtype="bfloat16")[0].dtype == torch.bfloat16


@pytest.mark.parametrize("revision", [OTHER, "v1"], ids=["commit", "tag"])
def test_at_revision_loads_that_snapshot(hub_cache, revision):
    _, weights = hub_cache
    net, _ = load_model(f"{REPO}@{revision}")
    assert same_weights(net, weights[OTHER]) and not same_weights(net, weights[MAIN])


def test_offline_without_the_model_is_one_line(hub_cache):
    """Not cached and HF_HUB_OFFLINE=1: one line naming the model, the cache folder and the
    switch; a FileNotFoundError, so ``slca`` prints it as one line and exits 2."""
    cache, _ = hub_cache
    for name in ("testorg/absent-model", f"{REPO}@no-such-branch"):
        with pytest.raises(HubModelError) as caught:
            load_model(name)
        message = str(caught.value)
        assert isinstance(caught.value, FileNotFoundError) and "\n" not in message
        assert repr(name) in message and f"cache at {cache}" in message
        assert "HF_HUB_OFFLINE is set" in message and len(message) <= 400


def test_a_local_folder_wins_over_the_hub_id(hub_cache, tmp_path, monkeypatch):
    """A folder named like the repo id in the working directory is loaded, not the Hub."""
    local = save_tiny(tmp_path / "work" / "testorg" / "tiny-model", seed=7)
    monkeypatch.chdir(tmp_path / "work")
    net, _ = load_model(REPO)
    assert same_weights(net, local)


@pytest.mark.parametrize("name", ["./testorg/tiny-model", "a/b/c", "~/no-such-model", "nope"])
def test_names_that_are_no_hub_id_keep_the_builtin_list(hub_cache, monkeypatch, name):
    import huggingface_hub

    def never(*args, **kwargs):
        raise AssertionError("the Hub was asked about a local path")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", never)
    with pytest.raises(FileNotFoundError, match=r"does not exist \(expected one of 'tiny'") as e:
        load_model(name)
    assert not isinstance(e.value, HubModelError) and "org/name@revision" in str(e.value)


@pytest.mark.parametrize(
    "name,parts",
    [
        ("Qwen/Qwen2.5-7B-Instruct", ("Qwen/Qwen2.5-7B-Instruct", None)),
        ("org/name@v1.0", ("org/name", "v1.0")),
        ("org/name@refs/pr/3", ("org/name", "refs/pr/3")),
        ("org/name@", None),
        ("tiny-sft", None),
        ("./org/name", None),
        ("/abs/path", None),
        ("a/b/c", None),
        ("a--b/c", None),
        ("org/name.gguf/x", None),
    ],
)
def test_split_hub_id(name, parts):
    assert split_hub_id(name) == parts


def test_cached_hub_folder_never_downloads(hub_cache):
    cache, _ = hub_cache
    snapshots = cache / "models--testorg--tiny-model/snapshots"
    assert cached_hub_folder(REPO) == str(snapshots / MAIN)
    assert cached_hub_folder(f"{REPO}@v1") == str(snapshots / OTHER)
    assert cached_hub_folder("testorg/absent-model") is None and cached_hub_folder("tiny") is None


def hub_error(status: int, code: str, repo: str):
    """The exception huggingface_hub raises for a Hub answer ``status`` with ``X-Error-Code:
    code`` (built by its own ``hf_raise_for_status`` from a response made here)."""
    from huggingface_hub.utils import hf_raise_for_status

    try:
        import httpx2 as http
    except ImportError:  # huggingface_hub < 2 answers with httpx
        import httpx as http
    url = f"https://huggingface.co/api/models/{repo}/revision/main"
    response = http.Response(
        status, headers={"X-Error-Code": code}, request=http.Request("GET", url)
    )
    try:
        hf_raise_for_status(response)
    except Exception as err:  # the error under test
        return err
    raise AssertionError("hf_raise_for_status raised nothing")


@pytest.mark.parametrize(
    "status,code,expected",
    [
        (403, "GatedRepo", ["is gated", "hf auth login", "HF_TOKEN", "accept its license"]),
        (401, "RepoNotFound", ["does not exist on the Hugging Face Hub", "private", "HF_TOKEN"]),
        (404, "RevisionNotFound", ["has no revision"]),
    ],
    ids=["gated", "missing", "revision"],
)
def test_hub_refusals_become_one_line(hub_cache, monkeypatch, status, code, expected):
    """The Hub's answer is simulated at the download boundary (``snapshot_download`` replaced
    by one that raises what huggingface_hub raises for that HTTP answer): no network here."""
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    seen = []

    def refused(repo_id, **kwargs):
        seen.append(kwargs["local_files_only"])
        raise hub_error(status, code, repo_id)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", refused)
    name = "someorg/some-model@main" if code == "RevisionNotFound" else "someorg/some-model"
    with pytest.raises(HubModelError) as caught:
        load_policy(name)
    message = str(caught.value)
    assert seen == [False] and "\n" not in message and repr(name) in message
    assert all(part in message for part in expected), message


def test_hub_unreachable_without_cache_is_one_line(hub_cache, monkeypatch):
    """Online, but the Hub cannot be reached and the model is not cached: huggingface_hub's
    ``LocalEntryNotFoundError`` (simulated at the boundary) becomes one line."""
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    cache, _ = hub_cache
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)

    def unreachable(repo_id, **kwargs):
        raise LocalEntryNotFoundError("An error happened while trying to locate the files\n...")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreachable)
    with pytest.raises(HubModelError, match="cannot be reached") as caught:
        load_model("someorg/some-model")
    assert f"cache at {cache}" in str(caught.value) and "\n" not in str(caught.value)


def test_cli_takes_a_hub_id(hub_cache, tmp_path):
    """``slca fit --config configs/quickstart.yaml --model.model testorg/tiny-model``, parsed
    and built in-process; ``configure_model`` loads the cached snapshot."""
    from slca_lightning.cli.commands import main

    _, weights = hub_cache
    cli = main(
        [
            "--config",
            str(ROOT / "configs/quickstart.yaml"),
            "--model.model",
            REPO,
            f"--trainer.default_root_dir={tmp_path / 'run'}",
        ],
        run=False,
    )
    module = cli.model
    assert module.hparams.model == REPO
    module.configure_model()
    assert same_weights(module.policy, weights[MAIN])
    assert module.tokenizer.pad_token is not None
    assert os.path.isdir(cached_hub_folder(REPO))
