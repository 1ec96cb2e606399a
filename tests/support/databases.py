"""Running a test on SQLite and on PostgreSQL (the publishing tests' transactions)."""

from __future__ import annotations

import pytest

SQLITE = pytest.param("default", marks=pytest.mark.django_db(transaction=True), id="sqlite")
POSTGRES = pytest.param(
    "pg",
    marks=pytest.mark.django_db(databases=["default", "pg"], transaction=True),
    id="postgresql",
)
#: Run the test once per database: ``alias`` is "default" (SQLite) or "pg".
on_both_databases = pytest.mark.parametrize("alias", [SQLITE, POSTGRES])


class Rollback(Exception):
    """Raised inside ``transaction.atomic`` to roll it back."""
