"""Order tools for agents: `submit_order` and `refund` served over MCP, write-safe."""
