"""The queues' named archives: list them and remove one, for ``manage.py redisq archives``
and the admin (both call these).

Removing an archive is the one way to make retention stop waiting for it (C14): every
registered archive holds the log (and the events) until it has stored them, so an
archive that no longer runs keeps them in Redis until someone removes it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from redisq_django import operations
from redisq_django.connection import get_broker
from redisq_django.core import Broker
from redisq_django.core.archives import ArchiveState
from redisq_django.core.keys import validate_name

#: The admin-history text of removing an archive (stored as is, read by anyone).
REMOVED_LOG = "Removed archive {name}: retention no longer waits for it"


def list_archives(
    queues: list[str] | None = None, *, broker: Broker | None = None
) -> list[ArchiveState]:
    """Every archive of ``queues`` (default: all), by queue, name and table (and by
    partition of a partitioned queue), with its position, lag, registration time and
    unsettled gap."""
    b = broker or get_broker()
    names = operations.all_queue_names() if queues is None else queues
    return [state for queue in names for state in b.archives.states(queue)]


def remove_archive(
    name: str, queue: str | None = None, *, broker: Broker | None = None, user: Any = None
) -> list[str]:
    """Remove archive ``name`` from ``queue`` (default: every queue); with ``user``, write
    it to the admin history of each queue's row.

    Returns:
        The queues it was registered on (empty: none).

    Raises:
        InvalidName: ``name`` or ``queue`` is not a valid name.
    """
    validate_name("archive", name)
    b = broker or get_broker()
    queues = [validate_name("queue", queue)] if queue else operations.all_queue_names()
    removed = [q for q in queues if b.archives.remove(q, name)]
    if user is not None:
        for q in removed:
            operations.record_change(user, q, None, REMOVED_LOG.format(name=name))
    return removed


def where(state: ArchiveState) -> str:
    """Whose position ``state`` is: its queue's, or ``queue#i`` for partition ``i`` of a
    partitioned queue (each keeps its own)."""
    return state.queue if state.partition is None else f"{state.queue}#{state.partition}"


def registered_at(state: ArchiveState) -> str:
    """When ``state``'s archive registered, in UTC (an earlier version's: ``before upgrade``)."""
    if state.since_ms is None:
        return "before upgrade"
    return dt.datetime.fromtimestamp(state.since_ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def gap_text(state: ArchiveState) -> str:
    """The gap a hard cap or a purge made after its position, in words ("" when none):
    ``1-0 to 9-0 (5) dropped by the hard cap``, ``… (5) removed by a purge at 2026-12-02
    18:00:00 UTC``, or both."""
    gap = state.gap
    if gap is None:
        return ""
    span = f"{gap.first} to {gap.last} ({gap.count})"
    if gap.purge is None:
        return f"{span} dropped by the hard cap"
    at = dt.datetime.fromtimestamp(gap.purge.at_ms / 1000, dt.UTC)
    purged = f"removed by a purge at {at:%Y-%m-%d %H:%M:%S} UTC"
    if gap.purge.count >= gap.count:
        return f"{span} {purged}"
    return f"{span}: {gap.purge.count} {purged}, the others dropped by the hard cap"
