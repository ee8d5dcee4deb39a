"""``python -m slca_lightning.eval.tau2``: the evaluator's command line."""

from slca_lightning.eval.tau2.evaluator import main

if __name__ == "__main__":
    main()
