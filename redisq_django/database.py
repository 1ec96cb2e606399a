"""Writing rows that other processes write at the same moment: a bounded retry when their
transactions are in the way (SQLite's "database is locked", a PostgreSQL deadlock, the
row another process has just created)."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import IntegrityError, OperationalError, connection

T = TypeVar("T")

#: Attempts at a write while other processes hold the database.
ATTEMPTS = 8
#: Wait before the second attempt, seconds; doubled for each further one (at most
#: :data:`MAX_WAIT_S`), each wait between half and all of it.
FIRST_WAIT_S = 0.05
MAX_WAIT_S = 1.0

#: Fragments of the database errors another process's transaction causes.
_CONTENDED = ("database is locked", "database table is locked", "deadlock", "serializ")


def contended(exc: Exception) -> bool:
    """Whether ``exc`` came from another process's transaction (trying again may pass):
    a lock or deadlock, or a row created meanwhile (an ``IntegrityError``)."""
    text = str(exc).lower()
    return isinstance(exc, IntegrityError) or any(f in text for f in _CONTENDED)


def retry_on_contention(write: Callable[[], T], *, what: str, logger: logging.Logger) -> T:
    """``write()``, tried again while another process's transaction is in its way.

    Made for the synchronisations every ``runconsumer`` start runs, often several at the
    same moment: ``write`` reads first and writes only what differs, so the next attempt
    usually finds the rows already written by the other process. Inside a transaction
    it runs once: a failed statement there cannot be tried again.

    Args:
        write: reads, and writes in its own transaction; called once per attempt.
        what: what it writes, for the log line of each retry ("consumer rows").
        logger: where that line goes (INFO).

    Returns:
        What ``write`` returned.

    Raises:
        OperationalError, IntegrityError: the database stayed contended through
            :data:`ATTEMPTS` attempts, or failed otherwise.
    """
    attempts = 1 if connection.in_atomic_block else ATTEMPTS
    for attempt in range(1, attempts + 1):
        try:
            return write()
        except (OperationalError, IntegrityError) as exc:
            if attempt == attempts or not contended(exc):
                raise
            wait = min(MAX_WAIT_S, FIRST_WAIT_S * 2 ** (attempt - 1))
            logger.info("Syncing %s met %s; trying again (%d)", what, exc, attempt)
            time.sleep(random.uniform(wait / 2, wait))
    raise AssertionError("unreachable")  # the loop returns or raises
