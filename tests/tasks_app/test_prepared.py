"""The runner's prepared statements: written with psycopg's placeholders, sent
with PostgreSQL's own, converted once per statement (`tasks_app.prepared`)."""
from __future__ import annotations

import pytest

from tasks_app.prepared import fetch_all_prepared, fetch_one_prepared, native


def test_named_placeholders_become_numbered_once_per_name() -> None:
    text, names = native("SELECT %(a)s, %(b)s, %(a)s || '%%'")
    assert text == "SELECT $1, $2, $1 || '%'"
    assert names == ("a", "b")


def test_positional_placeholders_are_numbered_in_order() -> None:
    assert native("SELECT %s, %s") == ("SELECT $1, $2", None)


def test_a_statement_cannot_mix_named_and_positional_placeholders() -> None:
    with pytest.raises(ValueError, match="not both"):
        native("SELECT %(a)s, %s")


@pytest.mark.django_db
@pytest.mark.postgres_only("prepared statements are PostgreSQL's")
def test_a_statement_of_more_than_fifty_named_parameters_runs_prepared() -> None:
    """More parameters than psycopg keeps the conversion of, a name used twice,
    a literal percent sign; run twice (the second time, prepared)."""
    names = [f"p{i}" for i in range(60)]
    sql = "SELECT " + ", ".join(f"%({n})s::int" for n in names) + ", %(p0)s::int, '100%%'"
    params = {n: i for i, n in enumerate(names)}
    for _ in range(2):
        row = fetch_one_prepared(sql, params)
        assert row == (*range(60), 0, "100%")


@pytest.mark.django_db
@pytest.mark.postgres_only("prepared statements are PostgreSQL's")
def test_a_missing_parameter_is_an_error_not_a_null() -> None:
    with pytest.raises(KeyError):
        fetch_one_prepared("SELECT %(a)s::int, %(b)s::int", {"a": 1})


@pytest.mark.django_db
@pytest.mark.postgres_only("prepared statements are PostgreSQL's")
def test_positional_parameters_fetch_every_row() -> None:
    rows = fetch_all_prepared("SELECT g FROM generate_series(%s::int, %s::int) g", [3, 5])
    assert rows == [(3,), (4,), (5,)]
