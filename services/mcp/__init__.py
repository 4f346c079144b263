"""tiermem's memory as MCP tools: mounted in the API at /mcp, or over stdio (`tiermem mcp`)."""
