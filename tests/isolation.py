"""What each pytest-xdist worker of the suite keeps to itself.

`scripts/test` runs the suite in several processes (`-n`). pytest-django gives
each its own test database (the name suffixed `_gw0`, `_gw1`, ...); the Redis
databases of the Celery broker and of the channel layer are picked here, so
that one process's workers never take another's messages. Outside xdist (or
in its first worker) the URLs are left as given. No Django import: read by
tests/settings.py and tests/processes.py before Django is set up.
"""
from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

# Redis databases for workers gw1, gw2, ... as (broker, channel layer); gw0 keeps
# the configured ones (12 and 14 by default). The bench uses 6 and 7.
_OTHER_WORKERS = [(11, 13), (10, 15), (9, 8), (5, 4), (3, 2)]


def xdist_index() -> int:
    """0 outside xdist and in its first worker, else the worker's number."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") else 0


def per_worker_redis(url: str, *, role: str) -> str:
    """`url` with the Redis database of this xdist worker for `role`
    ("broker" or "layer")."""
    index = xdist_index()
    if index == 0:
        return url
    if index > len(_OTHER_WORKERS):
        raise RuntimeError(f"at most {len(_OTHER_WORKERS) + 1} xdist workers (Redis databases)")
    broker, layer = _OTHER_WORKERS[index - 1]
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{broker if role == 'broker' else layer}"))
