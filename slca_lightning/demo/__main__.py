"""``python -m slca_lightning.demo``."""

from slca_lightning.demo import main

main()
