"""The names the store's SQL uses.

Table names come from the models' `_meta` and statuses from the enums, so a
SQL string never spells a table or a status by hand.
"""
from __future__ import annotations

from typing import Any, cast

from django.db import connection, models


def table(model: type[models.Model]) -> str:
    return model._meta.db_table


def column(model: type[models.Model], name: str) -> str:
    """The column of field `name` (as the model's `_meta` says)."""
    return str(cast(models.Field, model._meta.get_field(name)).column)  # type: ignore[type-arg]


def json_param(model: type[models.Model], field: str, value: Any) -> Any:
    """`value` adapted for a JSON column exactly as the ORM would write it."""
    return cast(models.Field, model._meta.get_field(field)).get_db_prep_save(  # type: ignore[type-arg]
        value, connection)
