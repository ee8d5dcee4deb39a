"""Evaluation: torchmetrics metrics, in-domain / BFCL / tau2 evaluators (METHOD §8).

One subpackage per external benchmark (``bfcl/``, ``tau2/``); the shared metrics, the
evaluator registry, plots and the ``slca eval`` runner sit beside them. The flat module
names of earlier versions (``slca_lightning.eval.bfcl_checker``, ``...tau2_users``, ...)
still import, as the moved modules themselves (:mod:`slca_lightning.moved`).
"""

from slca_lightning.moved import alias

#: Old flat module → its module in the benchmark's subpackage.
MOVED = {
    **{f"slca_lightning.eval.bfcl_{n}": f"slca_lightning.eval.bfcl.{n}"
       for n in ("answers", "checker", "data", "multi_turn")},
    **{f"slca_lightning.eval.tau2_{n}": f"slca_lightning.eval.tau2.{n}"
       for n in ("env", "loop", "scoring", "users")},
}  # fmt: skip
alias(MOVED)
