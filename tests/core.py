"""The runtime core, which the embedded mode runs on SQLite: `scripts/test`
runs these tests (`-m core`) a second time with TETHER_TEST_DB=sqlite, and
`tests/conftest.py` marks them `core`. Paths under tests/. No imports: the
script reads the list before Django is set up, to collect only these files.

(The embedded server's own tests, which start `scripts/start` on a SQLite file
of their own, run on SQLite in either pass: they are not repeated.)
"""

CORE_TESTS = (
    "tasks_app/",
    "accounts_app/test_vault.py",
    "retries/test_retry.py",
    "leases/",
    "approvals_app/",
    "tools_app/test_uncertain_writes.py",
    "schedules_app/test_firing.py",
    "schedules_app/test_cron.py",
    "memory_app/",
)
