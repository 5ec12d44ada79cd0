"""The audit log of configuration: who changed which tool, agent, secret (names
only), webhook or membership of a tenant, when, and what changed."""
