"""Old module names that still import after a module moved (configs and checkpoints name
classes by module path).

:func:`alias` registers ``{old name: new name}``; importing the old name then gives the
new module itself (the same object, with its own ``__spec__``). A package whose modules
moved calls it in its ``__init__``, which Python runs before it resolves any child name.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys

__all__ = ["MOVED", "alias"]

#: Every registered old module name → the module it moved to.
MOVED: dict[str, str] = {}


class _MovedModule(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old name of :data:`MOVED` as the module it moved to."""

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


def alias(moves: dict[str, str]) -> None:
    """Let each old module name of ``moves`` import as its new module."""
    MOVED.update(moves)
    if not any(isinstance(f, _MovedModule) for f in sys.meta_path):
        sys.meta_path.append(_MovedModule())
