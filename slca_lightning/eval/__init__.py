"""Evaluation: torchmetrics metrics, the in-domain, BFCL and τ² evaluators (METHOD §8).

One subpackage per external benchmark (``bfcl/``, ``tau2/``); the shared metrics, the
evaluator registry, plots and simulator fidelity sit beside them. The ``slca eval`` command
that runs them is :mod:`slca_lightning.cli.evaluate`.
"""
