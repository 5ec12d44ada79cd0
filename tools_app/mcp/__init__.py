"""MCP servers as a tool source, on the official `mcp` SDK.

- `connections`: the pooled client sessions (one per server per process) and
  the calls over them, through the outbound-address policy;
- `catalog`: a server's listing as Tether tools (names, schemas, hint defaults);
- `services`: register, change, delete and refresh a tenant's servers.

Calls are made by the executor (`tools_app.executor.mcp_kind`).
"""
