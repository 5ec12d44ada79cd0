"""`flush` for the suite: what pytest-django runs after every transactional test
(~400 of them), made cheap.

Django's flush TRUNCATEs every table (a new file per table and index: about a
second per test on a loaded 2-core machine) and then emits `post_migrate`, which
re-creates every content type and permission the flush just removed. Here the
tables are emptied with DELETE in one transaction (the foreign keys are
deferred, so the order does not matter) and the rows `post_migrate` would
re-create are kept, so the signal has nothing to do. The database ends as
Django's flush leaves it: every table empty but those two, which hold exactly
what migrating made (and their sequences past those rows). Anything else
(sequence resets, cascades, an interactive run, another `post_migrate`
receiver, another database engine) goes to Django's own flush.
"""

from __future__ import annotations

import weakref
from typing import Any

from django.core.management.commands.flush import Command as DjangoFlush
from django.db import connections, transaction
from django.db.models.signals import post_migrate

# What the post_migrate receivers of contrib.contenttypes and contrib.auth fill.
KEPT_TABLES = {"django_content_type", "auth_permission"}
KNOWN_RECEIVERS = {"create_contenttypes", "create_permissions"}


def _only_known_receivers() -> bool:
    names = set()
    for _key, ref, *_ in post_migrate.receivers:
        receiver = ref() if isinstance(ref, weakref.ReferenceType) else ref
        names.add(getattr(receiver, "__name__", repr(receiver)))
    return names <= KNOWN_RECEIVERS


class Command(DjangoFlush):
    def handle(self, **options: Any) -> None:
        connection = connections[options["database"]]
        fast = (
            connection.vendor == "postgresql"
            and not options["interactive"]
            and not options.get("reset_sequences", True)
            and not options.get("allow_cascade", False)
            and not options.get("inhibit_post_migrate", False)
            and _only_known_receivers()
        )
        if not fast:
            super().handle(**options)
            return
        tables = connection.introspection.django_table_names(
            only_existing=True, include_views=False
        )
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            for table in sorted(set(tables) - KEPT_TABLES):
                cursor.execute(f"DELETE FROM {connection.ops.quote_name(table)}")
            # A test with `reset_sequences` restarts every sequence at 1, the kept
            # tables' too, while their rows stay: bring those two past their rows,
            # or the next content type made (a migrate in a test) takes id 1 again.
            for table in sorted(KEPT_TABLES & set(tables)):
                quoted = connection.ops.quote_name(table)
                cursor.execute(
                    f"SELECT setval(pg_get_serial_sequence(%s, 'id'), COALESCE(MAX(id), 1), "
                    f"MAX(id) IS NOT NULL) FROM {quoted}", [table])
