"""``python -m slca_lightning.eval``: the same command as ``slca eval``."""

from slca_lightning.eval.standalone import script

if __name__ == "__main__":
    script()
