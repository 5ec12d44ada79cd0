"""Notifications when a person is needed: webhook subscriptions per tenant and
e-mail to the tenant's reviewers, sent from a durable outbox (see `models`)."""
