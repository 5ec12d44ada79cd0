"""Tether as an MCP server: a tenant's published agents and workflows as MCP
tools, its tasks as MCP resources, at `/mcp` (Streamable HTTP).

- `asgi`: the endpoint (bearer API key, the SDK's session manager, started
  on the first request);
- `server`: the MCP handlers (thin: they check, call the catalog, present);
- `catalog`: what a caller sees and may run, and the runs themselves
  (start, wait, answer), on the task and workflow services.
"""
