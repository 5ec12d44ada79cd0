"""Fixtures of the system tests' shared worlds (tests/system/io_world.py)."""
from tests.system.io_world import edge, io_world  # noqa: F401
