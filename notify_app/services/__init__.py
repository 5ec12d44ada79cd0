"""Writes of notify_app: subscriptions, the outbox, delivery, the sweep."""
