"""Evaluation: torchmetrics metrics, in-domain / BFCL / tau2 evaluators (METHOD §8)."""
