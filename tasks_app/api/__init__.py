"""The REST API v1 (thin views over services)."""
