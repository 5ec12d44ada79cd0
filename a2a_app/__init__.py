"""Tether as an A2A (Agent2Agent protocol, v1.0) server, on the official `a2a-sdk`.

Each published agent of a tenant is one A2A agent, at
`/a2a/<tenant>/<agent>` (JSON-RPC) with its card at
`/a2a/<tenant>/<agent>/.well-known/agent-card.json`; each published workflow
too, under `/a2a/<tenant>/workflows/<workflow>`. The SDK brings the
protocol's types and its JSON-RPC plumbing (`a2a.server.routes`); this
package is the door onto what Tether already does: `handler` turns each A2A
method into a call of the task services, `states` maps a task's status to an
A2A state (the one table), `cards` writes the cards, `caller` authenticates
the bearer API key and finds the agent or workflow, `events` follows a task's
events for the streams, and `app` is the ASGI application `config.asgi`
routes `/a2a/` to. No models: not an installed app.
See docs/how-to/a2a.md.
"""
