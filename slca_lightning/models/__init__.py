"""Built-in models and tokenizers the product runs on (offline, built in seconds).

- :mod:`.tiny`: a 0.66M-parameter Qwen2 on a 518-token BPE (tests, the demo, benchmarks);
- :mod:`.suite`: the suite model, whose tokenizer is trained on the synthetic suite's text
  (the quickstart's and the study's policy after its SFT warm start, ``"suite-sft"``, or
  after SFT on pooled demonstrations, ``"suite-pooled-sft"``: :mod:`.warm_start`).
"""

from slca_lightning.models.suite import build_suite_model, build_suite_tokenizer
from slca_lightning.models.tiny import build_tiny_model, build_tiny_tokenizer

__all__ = ["build_suite_model", "build_suite_tokenizer", "build_tiny_model", "build_tiny_tokenizer"]
