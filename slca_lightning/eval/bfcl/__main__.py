"""``python -m slca_lightning.eval.bfcl``: the evaluator's command line."""

from slca_lightning.eval.bfcl.evaluator import main

if __name__ == "__main__":
    main()
