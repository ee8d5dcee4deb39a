"""MkDocs hook: one API reference page per public package, following the package layout.

``api/<name>.md`` is generated at build time (nothing to keep in sync by hand): the
package's own docstring, then one mkdocstrings block per module of the package, in file
order, subpackages after the modules (``slca_lightning.eval.bfcl`` ...). Each block
renders what that module defines; a package's ``__init__`` shows only its docstring, so a
class re-exported by its package (``slca_lightning.advantages.SLCARouter``) is documented
once, where it is defined (``slca_lightning.advantages.presets.SLCARouter``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
#: page name → the package it documents, in the order of the nav.
PACKAGES = {
    "advantages": "slca_lightning.advantages",
    "segmenters": "slca_lightning.segmenters",
    "rewards": "slca_lightning.rewards",
    "tools": "slca_lightning.tools",
    "calls": "slca_lightning.calls",
    "rollout": "slca_lightning.rollout",
    "training": "slca_lightning.training",
    "models": "slca_lightning.models",
    "data": "slca_lightning.data",
    "eval": "slca_lightning.eval",
    "cli": "slca_lightning.cli",
    "config": "slca_lightning.config",
    "types": "slca_lightning.types",
    "logprobs": "slca_lightning.logprobs",
    "chat_backends": "slca_lightning.chat_backends",
    "callbacks": "callbacks",
}


def modules(package: str) -> list[str]:
    """Dotted names of the modules of ``package`` (itself first, then its modules in file
    order, then each subpackage's), without ``__main__`` and private modules."""
    folder = ROOT.joinpath(*package.split("."))
    if not folder.is_dir():  # a plain module
        return [package]
    out = [package]
    children = sorted(folder.iterdir())
    for path in children:
        if path.suffix == ".py" and not path.name.startswith("_"):
            out.append(f"{package}.{path.stem}")
    for path in children:
        if path.is_dir() and (path / "__init__.py").is_file():
            out += modules(f"{package}.{path.name}")
    return out


def page(package: str) -> str:
    """The Markdown of one package's API page."""
    lines = [f"# {package}", ""]
    for name in modules(package):
        is_package = ROOT.joinpath(*name.split("."), "__init__.py").is_file()
        if name == package:
            options = ["members: false", "show_root_heading: false"] if is_package else []
        else:
            options = ["members: false"] if is_package else []
        lines.append(f"::: {name}")
        if options:
            lines += ["    options:", *(f"      {o}" for o in options)]
        lines.append("")
    return "\n".join(lines)


def on_files(files: Files, config: Any) -> Files:
    """Add ``api/<name>.md`` for every package of :data:`PACKAGES`."""
    for name, package in PACKAGES.items():
        files.append(File.generated(config, f"api/{name}.md", content=page(package)))
    return files
