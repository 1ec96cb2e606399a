"""Migration 0010: the dead letters stored before addresses were variables get their
grouping key by the new rules, in batches, and one error split by its addresses is one
cause again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from redisq_django.core.dead_entry import normalise_error

pytestmark = pytest.mark.django_db(transaction=True)

APP = "redisq_django"
BEFORE = [(APP, "0009_inbox")]
AFTER = [(APP, "0010_deadletter_error_key_addresses")]
#: More rows than one batch of the migration holds (500), and not a multiple of it.
ROWS = 1_203
BARE_KEY = "The database refused this dead letter's details"


def migrate(targets: list[tuple[str, str]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return MigrationExecutor(connection)


@pytest.fixture(autouse=True)
def back_to_the_latest_migrations() -> Iterator[None]:
    """Later tests need every table: migrate forward to the leaves again afterwards."""
    yield
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_dead_letters_split_by_their_addresses_are_one_cause_again() -> None:
    # Given 1,203 "connection refused" dead letters from 1,203 addresses, each with the
    # key the earlier rules gave it (one cause per address), a row the sink stored bare,
    # and one whose key was already right
    old = migrate(BEFORE).loader.project_state(BEFORE).apps
    DeadLetter = old.get_model(APP, "DeadLetter")
    addresses = [f"10.{n // 250}.{n % 250}.{n % 7}" for n in range(ROWS)]
    DeadLetter.objects.bulk_create(
        DeadLetter(
            queue="shop",
            consumer="stock",
            message_id=f"m{n}",
            payload="{}",
            reason="failed",
            error_class="ConnectionError",
            error_message=f"Error 111 connecting to {address}:6379. Connection refused.",
            error_key="Error <n> connecting to <n>." + address.split(".", 1)[1] + ":<n>. "
            "Connection refused.",
        )
        for n, address in enumerate(addresses)
    )
    assert DeadLetter.objects.order_by().values("error_key").distinct().count() > 1_000
    bare_message = (
        "The database refused this dead letter's details; the payload field holds the "
        "entry's raw fields."
    )
    DeadLetter.objects.create(
        queue="shop",
        consumer="stock",
        message_id="bare",
        payload="{}",
        reason="failed",
        error_message=bare_message,
        error_key=BARE_KEY,
    )
    DeadLetter.objects.create(
        queue="shop",
        consumer="billing",
        message_id="card",
        payload="{}",
        reason="failed",
        error_message="card declined for order 1234",
        error_key="card declined for order <n>",
    )

    # When the migration runs
    new = migrate(AFTER).loader.project_state(AFTER).apps

    # Then the 1,203 are one cause, with the key the sink now writes
    rows = new.get_model(APP, "DeadLetter").objects
    refused = "Error 111 connecting to <ip>:<port>. Connection refused."
    assert normalise_error("Error 111 connecting to 10.9.8.7:6380. Connection refused.") == (
        refused
    )
    stock = rows.filter(consumer="stock").exclude(message_id="bare").order_by()
    assert list(stock.values_list("error_key", flat=True).distinct()) == [refused]
    assert rows.filter(error_key=refused).count() == ROWS
    # And the bare row and the row already right keep their keys
    assert rows.get(message_id="bare").error_key == BARE_KEY
    assert rows.get(message_id="card").error_key == "card declined for order <n>"
