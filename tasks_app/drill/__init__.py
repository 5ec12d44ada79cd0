"""Fault drills (`manage.py drill`): a fault-injection exercise against the
deployment the settings point at, in a tenant of its own, with a downstream
of its own (`downstream`), run by `exercise`. Nothing here is imported by the
runtime; nothing here imports the tests."""
