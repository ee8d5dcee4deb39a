"""Moved to :mod:`slca_lightning.tools.suite_mcp_server` (kept so old imports and
``python -m slca_lightning.testing.mcp_server`` keep working)."""

from slca_lightning.tools.suite_mcp_server import *  # noqa: F403
from slca_lightning.tools.suite_mcp_server import __all__, main  # noqa: F401

if __name__ == "__main__":
    main()
