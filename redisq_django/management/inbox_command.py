"""The inbox of ``atomic=True`` consumers from the shell: ``manage.py redisq inbox count``
and ``manage.py redisq inbox prune`` (``consuming/inbox.py``)."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from redisq_django.consuming import inbox
from redisq_django.core import bounds
from redisq_django.management.console import Write, table


def add_inbox(sub: Any, common: list[argparse.ArgumentParser]) -> None:
    """The ``inbox`` sub-command and its own sub-commands."""
    p = sub.add_parser(
        "inbox",
        parents=common,
        help="the inbox of atomic=True consumers: count its rows, delete old ones",
    )
    verbs = p.add_subparsers(dest="inbox_verb", required=True)
    counting = verbs.add_parser("count", parents=common, help="rows per queue and consumer")
    counting.add_argument("--queue", help="only this queue")
    counting.set_defaults(handler=count)
    pruning = verbs.add_parser(
        "prune",
        parents=common,
        help="delete rows older than REDISQ['INBOX_RETENTION'] (the workers do it too)",
        description="Delete inbox rows older than --older-than seconds (default: "
        "REDISQ['INBOX_RETENTION']), 1,000 per statement. A message delivered again after "
        "its row is gone runs again: keep the rows longer than a message can come back.",
    )
    pruning.add_argument("--older-than", type=bounds.argument("inbox_retention"), metavar="SECONDS")
    pruning.set_defaults(handler=prune)
    for verb in (counting, pruning):
        verb.add_argument("--database", help="the database of the inbox (default: its router's)")


def count(opts: dict[str, Any], write: Write) -> None:
    """``redisq inbox count``."""
    found = inbox.count(opts["database"], opts["queue"])
    if not found:
        write("The inbox is empty.")
        return
    rows = [["QUEUE", "CONSUMER", "ROWS"]]
    rows += [[q, c, str(n)] for (q, c), n in found.items()]
    write(table(rows))


def prune(opts: dict[str, Any], write: Write) -> None:
    """``redisq inbox prune``: every old row, one bounded round after another."""
    seconds = opts["older_than"]
    older = None if seconds is None else dt.timedelta(seconds=seconds)
    total = 0
    for _ in range(10_000):  # bounded: 20 million rows per call at most
        deleted = inbox.prune(opts["database"], older_than=older)
        total += deleted
        if deleted < inbox.PRUNE_BATCH * inbox.PRUNE_ROUNDS:
            break
    write(f"Deleted {total} inbox row(s).")
