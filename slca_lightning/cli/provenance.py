"""Provenance of a run: what a figure needs so that someone else can check it.

:class:`RunProvenance` (added to every ``slca fit`` by the CLI) writes
``<log_dir>/provenance.json`` at fit start, on rank zero: package versions, Python, the
machine's cores and load average, torch and BLAS threads (and ``OMP_NUM_THREADS``), the
seeds (``seed_everything``, ``model.seed``, ``data.seed``), the SHA-256 of the resolved
config, the model source and, for a built-in warm start or a local folder, a hash of its
weights' bytes, and the git commit of the checkout when there is one. At fit end it adds
the wall time and peak RSS.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import resource
import subprocess
import time
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback

__all__ = ["RunProvenance", "folder_digest", "provenance"]


def folder_digest(folder: str | os.PathLike) -> str | None:
    """SHA-256 over the names and bytes of a model folder's weight and tokenizer files (not
    this package's own ``slca_*.json`` markers, which record where the folder came from: the
    same weights give the same digest on every machine)."""
    root = Path(folder)
    if not root.is_dir():
        return None
    h = hashlib.sha256()
    for path in sorted(root.iterdir()):
        if path.name.startswith("slca_") and path.suffix == ".json":
            continue
        if path.suffix in (".safetensors", ".bin", ".json", ".model", ".gguf") and path.is_file():
            h.update(path.name.encode())
            with path.open("rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
    return h.hexdigest()


def _git_commit() -> str | None:
    here = Path(__file__).resolve().parents[1]
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=here, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def provenance(config: dict | None = None, model_source: str | None = None) -> dict[str, Any]:
    """The provenance record (see the module docstring)."""
    import lightning
    import torch
    import transformers

    import slca_lightning

    cfg = config or {}
    model_cfg = cfg.get("model") or {}
    data_cfg = cfg.get("data") or {}
    text = json.dumps(cfg, sort_keys=True, default=str)
    source = model_source or model_cfg.get("model")
    path = None
    if isinstance(source, str) and source.endswith("-sft"):
        from slca_lightning.models.names import warm_start_base
        from slca_lightning.models.warm_start import warm_start

        base = warm_start_base(source)
        path = warm_start(base=base) if base is not None else None
    elif isinstance(source, str) and os.path.isdir(os.path.expanduser(source)):
        path = os.path.expanduser(source)
    elif isinstance(source, str):  # a Hub id: its snapshot folder in the HF cache, if there
        from slca_lightning.models.hub import cached_hub_folder

        path = cached_hub_folder(source)
    return {
        "versions": {
            "slca_lightning": slca_lightning.__version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "lightning": lightning.__version__,
            "python": platform.python_version(),
        },
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "load_average": list(os.getloadavg()),
        "threads": {
            "torch": torch.get_num_threads(),
            "torch_interop": torch.get_num_interop_threads(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        },
        "seeds": {
            "seed_everything": cfg.get("seed_everything"),
            "model.seed": model_cfg.get("seed"),
            "data.seed": data_cfg.get("seed"),
        },
        "config_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "model_source": source,
        "model_folder": path,
        "model_sha256": folder_digest(path) if path else None,
        "git_commit": _git_commit(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


class RunProvenance(Callback):
    """Writes ``<log_dir>/provenance.json`` at fit start and completes it at fit end.

    Args:
        config: the resolved run config (the CLI passes its own).
        filename: the file name inside the trainer's log directory.
    """

    def __init__(self, config: dict | None = None, filename: str = "provenance.json") -> None:
        self.config = config
        self.filename = filename
        self.record: dict[str, Any] = {}
        self._t0 = 0.0

    def _path(self, trainer) -> str:
        return os.path.join(str(trainer.log_dir or trainer.default_root_dir), self.filename)

    def on_fit_start(self, trainer, pl_module) -> None:
        self._t0 = time.perf_counter()
        path = self._path(trainer)  # on every rank: trainer.log_dir is a collective under DDP
        if not trainer.is_global_zero:
            return
        source = getattr(getattr(pl_module, "hparams", None), "model", None)
        self.record = provenance(self.config, source)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(self.record, f, indent=2, default=str)

    def on_fit_end(self, trainer, pl_module) -> None:
        path = self._path(trainer)  # every rank (see on_fit_start)
        if not trainer.is_global_zero or not self.record:
            return
        self.record["fit_seconds"] = round(time.perf_counter() - self._t0, 1)
        self.record["peak_rss_gb"] = round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3
        )
        self.record["load_average_end"] = list(os.getloadavg())
        with open(path, "w") as f:
            json.dump(self.record, f, indent=2, default=str)
