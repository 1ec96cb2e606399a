"""``capture()``: what a block of code published, read back from Redis.

Nothing is faked or intercepted: every way of publishing (``publish``, ``publish_many``,
``publish_on_commit``, model events, the outbox, ``apublish``, a schedule's tick, a
Django task's enqueue, another process) ends as an entry in a queue's log or delayed
set, and :class:`Captured` reads those that appeared since the block began. What a test
sees is therefore what a consumer would get. No worker runs: the messages stay where
they are for a later :func:`~redisq_django.testing.drain`.

A ``TestCase`` runs each test in a transaction that never commits, so
``publish_on_commit`` and model events would never leave; :func:`capture` runs the
on-commit callbacks registered inside its block when it ends, as Django's
``captureOnCommitCallbacks(execute=True)`` does (``on_commit=False`` leaves them).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from redisq_django.connection import get_broker
from redisq_django.core import envelope as env
from redisq_django.core.clock import ms_from_entry_id, ms_to_datetime
from redisq_django.core.json import loads
from redisq_django.core.operator import MAX_PAGE, Entry
from redisq_django.core.wire import to_str, wire_int

#: A capture reads at most this many pages of one queue's log or delayed set
#: (``MAX_PAGE`` entries each): a test never publishes so many.
MAX_PAGES = 1000


@dataclass(frozen=True)
class Published:
    """One message as it was published (read from Redis).

    Attributes:
        queue: the queue it was published to (a task queue's level for a Django task:
            ``tasks.default``).
        id: its message id.
        payload: the decoded payload (the text as stored when it is not JSON).
        headers: the decoded headers (``{}`` without).
        key: its ordering key, or None.
        delay: for a delayed message, seconds from its publish to its due time, as Redis
            recorded them (to the millisecond; ``delay=60`` reads ``60.0`` to ``60.01``:
            compare with ``pytest.approx(60, abs=1)``); None for an immediate one.
        due_at: when a delayed message is due (Redis's clock), or None.
        published_at: when it was published.
    """

    queue: str
    id: str
    payload: Any
    headers: dict[str, Any]
    key: str | None
    delay: float | None
    due_at: dt.datetime | None
    published_at: dt.datetime | None


@dataclass
class Captured(Sequence[Published]):
    """The messages published since a :func:`capture` block began, oldest first: each
    queue's in publish order; messages of different queues by publish time, to the
    millisecond (Redis keeps no order across queues: within one millisecond they come
    in queue-name order, so compare one queue's, :meth:`to`). Read live inside the
    block, fixed when it ends.

    Use it as a list (``len``, indexing, iteration), or :meth:`to` one queue, or
    :meth:`payloads` of one queue.
    """

    start_ms: int = 0
    seen_before: set[tuple[str, str]] = field(default_factory=set)
    _fixed: list[Published] | None = None

    def read(self) -> list[Published]:
        """The messages published since the block began, read from Redis now (after the
        block: as they were when it ended)."""
        if self._fixed is not None:
            return list(self._fixed)
        return _published_since(self.start_ms, self.seen_before)

    def fix(self) -> None:
        """Keep what is published now; later reads return it."""
        self._fixed = _published_since(self.start_ms, self.seen_before)

    def to(self, queue: str) -> list[Published]:
        """The messages published to ``queue``."""
        return [m for m in self.read() if m.queue == queue]

    def payloads(self, queue: str | None = None) -> list[Any]:
        """The payloads published (to ``queue`` only, when given)."""
        return [m.payload for m in self.read() if queue is None or m.queue == queue]

    @overload
    def __getitem__(self, index: int) -> Published: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Published]: ...

    def __getitem__(self, index: int | slice) -> Published | Sequence[Published]:
        return self.read()[index]

    def __len__(self) -> int:
        return len(self.read())

    def __iter__(self) -> Iterator[Published]:
        return iter(self.read())

    def __repr__(self) -> str:
        return f"Captured({self.read()!r})"


@contextlib.contextmanager
def capture(*, on_commit: bool = True, using: str = "default") -> Iterator[Captured]:
    """Collect each message published inside the block, as Redis holds it.

    Args:
        on_commit: run the on-commit callbacks registered in the block (database
            ``using``) when it ends, so that ``publish_on_commit`` and model events
            inside a ``TestCase`` (whose transaction never commits) are published; as
            ``captureOnCommitCallbacks(execute=True)``. Do not nest that inside.
        using: the database alias whose on-commit callbacks are run.

    Yields:
        A :class:`Captured`, filled when the block ends (and readable inside it).
    """
    start_ms = get_broker().schedule_ledger.redis_time()
    captured = Captured(start_ms, _present_at(start_ms))
    if on_commit:
        from django.test import TestCase

        with TestCase.captureOnCommitCallbacks(using=using, execute=True):
            yield captured
    else:
        yield captured
    captured.fix()


def _present_at(start_ms: int) -> set[tuple[str, str]]:
    """(queue, message id) of the entries there already when a capture began that could
    pass for published since: log entries of its very millisecond, and delayed messages
    (a delayed message promoted later enters the log after ``start_ms``)."""
    seen: set[tuple[str, str]] = set()
    for queue in get_broker().queues():
        for entry in _log_since(queue, start_ms):
            seen.add((queue, entry.message_id))
        for entry in _delayed(queue):
            seen.add((queue, entry.message_id))
    return seen


def _published_since(start_ms: int, seen_before: set[tuple[str, str]]) -> list[Published]:
    found: list[tuple[int, Published]] = []
    for queue in get_broker().queues():
        entries = [*reversed(_log_since(queue, start_ms)), *_delayed(queue)]
        ids: set[str] = set()
        for entry in entries:
            # A message promoted between the two reads would be in both: once is enough.
            if (queue, entry.message_id) in seen_before or entry.message_id in ids:
                continue
            ids.add(entry.message_id)
            message = _published(queue, entry)
            found.append((entry.published_at_ms or 0, message))
    found.sort(key=lambda pair: pair[0])  # stable: each queue's log order is kept
    return [message for _, message in found]


def _log_since(queue: str, start_ms: int) -> list[Entry]:
    """The log entries of ``queue`` written at or after ``start_ms``, newest first."""
    operator = get_broker().operator
    out: list[Entry] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = operator.log(queue, cursor, MAX_PAGE)
        for entry in page.entries:
            if ms_from_entry_id(entry.key) < start_ms:
                return out
            out.append(entry)
        cursor = page.next
        if cursor is None:
            break
    return out


def _delayed(queue: str) -> list[Entry]:
    operator = get_broker().operator
    out: list[Entry] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = operator.delayed(queue, cursor, MAX_PAGE)
        out += page.entries
        cursor = page.next
        if cursor is None:
            break
    return out


def _published(queue: str, entry: Entry) -> Published:
    fields = entry.fields
    published_ms = entry.published_at_ms
    due_ms = entry.due_ms  # in the delayed set: its score
    if due_ms is None and env.F_DUE_AT in fields:  # delivered: the log keeps its due time
        due_ms = wire_int(fields[env.F_DUE_AT])
    delay = None
    if due_ms is not None and published_ms is not None:
        delay = round((due_ms - published_ms) / 1000, 3)
    return Published(
        queue=queue,
        id=entry.message_id,
        payload=_decoded(fields.get(env.F_PAYLOAD, fields.get(env.F_RAW_MEMBER, b""))),
        headers=_decoded(fields[env.F_HEADERS]) if env.F_HEADERS in fields else {},
        key=entry.ordering_key,
        delay=delay,
        due_at=ms_to_datetime(due_ms) if due_ms is not None else None,
        published_at=ms_to_datetime(published_ms) if published_ms is not None else None,
    )


def _decoded(raw: bytes) -> Any:
    try:
        return loads(raw)
    except ValueError:  # not JSON (written by hand): the text as stored
        return to_str(raw)
