"""What tests and fixtures use and the product never does: loopback HTTP and MCP servers
(:mod:`.servers`, :mod:`.mcp_server`) and scripted reward helpers (:mod:`.rewards`)."""
