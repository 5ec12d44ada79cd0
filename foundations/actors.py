"""Who did something: the system, a worker, or a user with a role."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Actor:
    name: str
    role: str = ""
    user_id: int | None = None

    @classmethod
    def worker(cls, owner: str) -> Actor:
        return cls(name=f"worker:{owner}", role="system")


SYSTEM = Actor(name="system", role="system")
