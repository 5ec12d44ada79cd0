"""Running the store's one-statement commits (PostgreSQL), and the names they use.

Table names come from the models' `_meta` and statuses from the enums, so a
SQL string never spells a table or a status by hand.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any, cast

from django.db import connection, models, transaction

from ..prepared import fetch_one_prepared


def table(model: type[models.Model]) -> str:
    return model._meta.db_table


def column(model: type[models.Model], name: str) -> str:
    """The column of field `name` (as the model's `_meta` says)."""
    return str(cast(models.Field, model._meta.get_field(name)).column)  # type: ignore[type-arg]


def json_param(model: type[models.Model], field: str, value: Any) -> Any:
    """`value` adapted for a JSON column exactly as the ORM would write it."""
    return cast(models.Field, model._meta.get_field(field)).get_db_prep_save(  # type: ignore[type-arg]
        value, connection)


def one_statement() -> bool:
    """PostgreSQL runs each commit as one statement of data-modifying CTEs;
    SQLite (the embedded mode) has none, and writes the same rows with the ORM."""
    return connection.vendor == "postgresql"


def run_one(sql: str, params: dict[str, Any], *, savepoint: bool = True) -> tuple[Any, ...] | None:
    """Run `sql`, prepared, and return its first row. Alone, the statement is its
    own transaction (no BEGIN/COMMIT round trips); inside a caller's transaction,
    with `savepoint`, a failure does not poison it."""
    enclosing = (transaction.atomic() if savepoint and connection.in_atomic_block
                 else nullcontext())
    with enclosing:
        return fetch_one_prepared(sql, params)
