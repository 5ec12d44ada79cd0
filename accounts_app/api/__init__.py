"""The REST API of accounts (thin views over services): members, API keys, secrets,
and the API-key authentication every endpoint uses."""
