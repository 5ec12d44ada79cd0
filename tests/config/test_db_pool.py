"""After a database restart every idle pooled connection is broken: the first
one the pool finds broken has it test all of them (`config.db_pool`), rather
than lend them one after another with a growing sleep between each."""
from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection

from config.db_pool import check_lent

POOLED = bool(settings.DATABASES["default"].get("OPTIONS", {}).get("pool"))
pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.postgres_only("the connection pool is PostgreSQL's"),
              pytest.mark.skipif(not POOLED, reason="with the connection pool only "
                                 "(DB_POOL_MAX_SIZE > 0; the suite's default)")]

IDLE = 4


def test_one_broken_connection_has_every_idle_one_tested_and_replaced() -> None:
    pool = connection.pool
    with connection.cursor():  # the pool has lent one: it tests with `check_lent`
        assert pool._check is check_lent
    lent = [pool.getconn() for _ in range(IDLE)]
    pids = [conn.info.backend_pid for conn in lent]
    for conn in lent:
        pool.putconn(conn)
    with connection.cursor() as cursor:  # a restart, as the idle connections see it
        cursor.execute("SELECT count(*) FROM (SELECT pg_terminate_backend(pid) "
                       "FROM unnest(%s::int[]) AS pid) AS ended", [pids])
        assert cursor.fetchone() == (IDLE,)
    lost_before = pool.get_stats().get("connections_lost", 0)

    with pytest.raises(Exception):  # noqa: B017,PT011 - psycopg's error for a closed connection
        check_lent(lent[0])

    assert pool.get_stats().get("connections_lost", 0) - lost_before >= IDLE - 1
    conn = pool.getconn(timeout=10)  # a working one, from the replacements
    try:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        assert conn.info.backend_pid not in pids
    finally:
        pool.putconn(conn)
