"""A tenant's memory: items that agents and people write, and that later tasks see."""
