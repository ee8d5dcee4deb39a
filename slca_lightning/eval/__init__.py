"""Evaluation: torchmetrics metrics, in-domain / BFCL / tau2 evaluators (METHOD §8).

One subpackage per external benchmark (``bfcl/``, ``tau2/``); the shared metrics, the
evaluator registry, plots and the ``slca eval`` runner sit beside them. The flat module
names of earlier versions (``slca_lightning.eval.bfcl_checker``, ``...tau2_users``, ...)
still import, as the moved modules themselves, so old configs and checkpoints that name a
class by them keep loading.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys

#: Old flat module → its module in the benchmark's subpackage.
MOVED = {
    **{f"slca_lightning.eval.bfcl_{n}": f"slca_lightning.eval.bfcl.{n}"
       for n in ("answers", "checker", "data", "multi_turn")},
    **{f"slca_lightning.eval.tau2_{n}": f"slca_lightning.eval.tau2.{n}"
       for n in ("env", "loop", "scoring", "users")},
}  # fmt: skip


class _MovedModule(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old name of :data:`MOVED` as the module it moved to (the same object)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        module = importlib.import_module(MOVED[spec.name])
        spec.loader_state = module.__spec__  # the import system overwrites __spec__ next
        return module

    def exec_module(self, module) -> None:
        """Nothing to run (it ran under its new name); give the module its own spec back."""
        module.__spec__ = module.__spec__.loader_state


if not any(isinstance(f, _MovedModule) for f in sys.meta_path):
    sys.meta_path.append(_MovedModule())
