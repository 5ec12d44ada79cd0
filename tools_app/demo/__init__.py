"""Seed 000's three demo tools, made real against a demo downstream store."""
