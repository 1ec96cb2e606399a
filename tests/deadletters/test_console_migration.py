"""Migration 0002: each existing dead letter keeps its failure as the first record of
its deaths, and gets its cause key (the normalised error)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

APP = "redisq_django"
BEFORE = [(APP, "0001_initial")]
AFTER = [(APP, "0002_console_deadletter_failures")]


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


def test_existing_dead_letters_keep_their_failure_and_get_a_cause_key() -> None:
    # Given dead letters stored before every death was kept
    old = migrate(BEFORE).loader.project_state(BEFORE).apps
    DeadLetter = old.get_model(APP, "DeadLetter")
    for n in range(3):
        DeadLetter.objects.create(
            queue="shop",
            consumer="billing",
            message_id=f"m{n}",
            payload="{}",
            reason="failed",
            attempts=6,
            error_class="ValueError",
            error_message=f"card declined for order {1000 + n}",
            traceback="Traceback ...",
        )

    # When the migration runs
    new = migrate(AFTER).loader.project_state(AFTER).apps

    # Then each has one failure with its details, a death count of 1, and one cause key
    rows = new.get_model(APP, "DeadLetter").objects.order_by("message_id")
    assert [(r.deaths, r.error_key) for r in rows] == [(1, "card declined for order <n>")] * 3
    failures = new.get_model(APP, "DeadLetterFailure").objects.order_by("dead_letter__message_id")
    assert [(f.dead_letter.message_id, f.error_message, f.attempts) for f in failures] == [
        (f"m{n}", f"card declined for order {1000 + n}", 6) for n in range(3)
    ]
