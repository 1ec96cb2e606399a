"""The one retry on database contention (``redisq_django.database``) that both syncs use.

The real contention (several ``runconsumer`` starting on one SQLite file) is
``tests/faults/test_start_together.py``; here, the policy: which errors are tried again, how
often, and never inside a transaction.
"""

from __future__ import annotations

import logging

import pytest
from django.db import IntegrityError, OperationalError, transaction

from redisq_django import database

logger = logging.getLogger("redisq.sync")


class Writes:
    """A write that fails with ``errors`` first, one per call, then returns its count."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.calls


# Outside a transaction: a test's own (django_db without transaction=True) would be one.
@pytest.mark.django_db(transaction=True)
def test_a_write_another_process_is_in_the_way_of_is_tried_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a write that meets a lock, then a row created meanwhile, then passes
    write = Writes(OperationalError("database is locked"), IntegrityError("UNIQUE failed"))

    # When it is run with the retry
    with caplog.at_level(logging.INFO, "redisq.sync"):
        result = database.retry_on_contention(write, what="test rows", logger=logger)

    # Then the third attempt's result comes back, and each retry was logged
    assert (result, write.calls) == (3, 3)
    assert caplog.text.count("Syncing test rows met") == 2


@pytest.mark.django_db(transaction=True)
def test_other_errors_and_a_contention_that_lasts_are_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(database, "MAX_WAIT_S", 0.01)  # seven waits, short ones

    # A database error that is not contention: at once
    broken = Writes(OperationalError("no such table: redisq_django_consumer"))
    with pytest.raises(OperationalError, match="no such table"):
        database.retry_on_contention(broken, what="test rows", logger=logger)
    assert broken.calls == 1

    # Contention through every attempt: the last one's error
    locked = Writes(*(OperationalError(f"deadlock {i}") for i in range(database.ATTEMPTS)))
    with pytest.raises(OperationalError, match=f"deadlock {database.ATTEMPTS - 1}"):
        database.retry_on_contention(locked, what="test rows", logger=logger)
    assert locked.calls == database.ATTEMPTS


@pytest.mark.django_db(transaction=True)
def test_inside_a_transaction_a_write_runs_once() -> None:
    # A failed statement inside the caller's transaction cannot be tried again
    write = Writes(OperationalError("database is locked"))
    with pytest.raises(OperationalError), transaction.atomic():
        database.retry_on_contention(write, what="test rows", logger=logger)
    assert write.calls == 1
