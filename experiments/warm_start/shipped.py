"""The shipped warm starts' validation curves, from their manifests, as the Markdown table of
``experiments/warm_start/README.md`` (a test checks the README's block against it)::

    python experiments/warm_start/shipped.py                 # print the table
    python experiments/warm_start/shipped.py --embed experiments/warm_start/README.md

Each cell is ``validation NLL / exact greedy episodes of 64`` on validation tasks 1280–1343
(demonstrations pooled as in training for ``suite-pooled-sft``), the selected step in bold.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from experiments.common import replace_block

BEGIN = "<!-- shipped curves: begin (python experiments/warm_start/shipped.py --embed experiments/warm_start/README.md) -->"
END = "<!-- shipped curves: end -->"
NAMES = ("suite-sft", "suite-pooled-sft")


def table() -> str:
    """The curves of :data:`NAMES` side by side, one column per selection point."""
    from slca_lightning.models.shipped import manifest

    infos = {name: manifest(name) for name in NAMES}
    steps = sorted({p["step"] for info in infos.values() if info for p in info["curve"]})
    lines = ["| warm start | " + " | ".join(str(s) for s in steps) + " | selected | rule |"]
    lines.append("|---|" + "---|" * (len(steps) + 2))
    for name, info in infos.items():
        if info is None:
            continue
        points = {p["step"]: p for p in info["curve"]}
        cells = []
        for s in steps:
            p = points.get(s)
            cell = "" if p is None else f"{p['validation_nll']:.3f} / {p['validation_exact']}"
            cells.append(f"**{cell}**" if s == info["step"] and cell else cell)
        lines.append(f"| `{name}` | " + " | ".join(cells) + f" | {info['step']} | {info['rule']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--embed", type=Path, default=None, help="write the table into this README")
    args = p.parse_args(argv)
    text = table()
    print(text)
    if args.embed:
        replace_block(args.embed, BEGIN, END, text)


if __name__ == "__main__":
    main()
