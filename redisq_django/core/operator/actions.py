"""What an operator does to messages before they die: deliver delayed messages or
retries now (one, some by id, or all), and discard what waits for one logical consumer
(its purge).

Each change is one script (``deliver_now.lua``, ``purge_consumer.lua``); the admin's live
pages and ``manage.py redisq`` call these functions.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import NamedTuple

import redis

from redisq_django.core import ended, members, ordered, redelivery
from redisq_django.core.clock import now_ms
from redisq_django.core.dead_entry import DeadReason, Failure, dead_fields
from redisq_django.core.errors import CorruptState, RedisqError, error_code
from redisq_django.core.groups import group_names
from redisq_django.core.keys import QueueKeys
from redisq_django.core.operator import browse
from redisq_django.core.scripts import Scripts
from redisq_django.core.start import StartPoint
from redisq_django.core.types import RedisClient
from redisq_django.core.wire import to_str

#: ``purge_consumer.lua`` removes at most this many entries per key and call...
PURGE_BATCH = 1000
#: ...and a purge makes at most this many calls (100 million entries).
PURGE_CALLS = 100_000
#: Delivering many now reads at most this many pages (of ``browse.MAX_PAGE``: 20 million).
DELIVER_PAGES = 100_000


class Undeliverable(RedisqError, ValueError):
    """A delayed or retry entry another Redis client wrote, which is no message of ours:
    delivered, it would only become a dead letter no handler can read (end or delete it
    instead)."""


def _refuse_unreadable(entry: browse.Entry) -> None:
    if entry.unreadable:
        raise Undeliverable(
            f"Entry {entry.message_id} was not delivered: another Redis client wrote it and "
            "it is no message of ours. Delivered, it would only become a dead letter no "
            "handler can read: end or delete it instead."
        )


def deliver_now(
    client: RedisClient, scripts: Scripts, keys: QueueKeys, consumer: str | None, ref: str
) -> str | None:
    """Deliver the delayed message or retry ``ref`` names (see ``browse.Entry.ref``) now.

    A delayed message is appended to the queue's log now (every logical consumer
    receives it, after what already waits there); a retry goes to its consumer's private
    input, which that consumer's next fetch reads. Either keeps its fields (its
    ``due_at`` says when it was due) and its attempt count.

    Returns:
        The new entry id, or None when it is gone (due and promoted, or delivered now by
        someone else, meanwhile).

    Raises:
        ValueError: ``ref`` names no delayed message or retry.
        Undeliverable: it is an entry another client wrote that is no message.
    """
    where = ref.partition(":")[0]
    if where not in (members.S_DELAYED, members.S_RETRY):
        raise ValueError(f"Only a delayed message or a retry can be delivered now, not {ref!r}.")
    entry = browse.find(client, keys, consumer, ref)
    return None if entry is None else deliver_entry(scripts, keys, consumer, entry)


def deliver_entry(
    scripts: Scripts, keys: QueueKeys, consumer: str | None, entry: browse.Entry
) -> str | None:
    """Deliver ``entry`` (a delayed message, or a retry of ``consumer``) now: see
    :func:`deliver_now`. Returns the new entry id, or None when it is gone.

    Raises:
        Undeliverable: it is an entry another client wrote that is no message.
    """
    _refuse_unreadable(entry)
    if entry.where == members.S_DELAYED:
        target = [keys.delayed, keys.log]
    elif entry.where == members.S_RETRY:
        gkeys = keys.group(consumer or "")
        target = [gkeys.retry, gkeys.direct]
    else:
        raise ValueError(f"Only a delayed message or a retry can be delivered now, not {entry}.")
    new_id = scripts("deliver_now", target, [entry.member])
    return to_str(new_id) if new_id else None


@dataclass(frozen=True)
class Delivered:
    """What :func:`deliver_waiting` did.

    Attributes:
        count: messages delivered now.
        ids: their message ids when ids were asked for (with ``--all``: empty).
        missing: ids asked for that were not waiting (no such id, or gone meanwhile).
        refused: ids of entries another client wrote that are no messages, left where
            they are (:class:`Undeliverable`).
    """

    count: int = 0
    ids: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def deliver_waiting(
    client: RedisClient,
    scripts: Scripts,
    keys: QueueKeys,
    consumer: str | None,
    ids: Collection[str] | None = None,
) -> Delivered:
    """Deliver now the queue's delayed messages (``consumer`` None) or the retries of
    logical consumer ``consumer``: those with a message id in ``ids``, or all of them
    (``ids`` None), each as :func:`deliver_entry` does.

    Read in pages of ``browse.MAX_PAGE``, whatever the set's size: finding ids walks the
    set until all are found; delivering all takes its first page again until it is empty
    (or :data:`DELIVER_PAGES` pages), so what is published meanwhile is delivered too.
    Entries another client wrote that are no messages stay where they are
    (``refused``: :class:`Undeliverable`); the pages walk past them.
    """

    def page(cursor: str | None) -> browse.Page:
        if consumer is None:
            return browse.delayed(client, keys, cursor, browse.MAX_PAGE)
        return browse.retrying(client, keys.group(consumer), cursor, browse.MAX_PAGE)

    cursor: str | None = None
    if ids is None:
        count, refused = 0, []
        for _ in range(DELIVER_PAGES):
            got = page(cursor)
            if not got.entries:
                break
            readable = [e for e in got.entries if not e.unreadable]
            refused += [e.message_id for e in got.entries if e.unreadable]
            count += sum(deliver_entry(scripts, keys, consumer, e) is not None for e in readable)
            if not readable:  # past a page that holds only entries that stay
                cursor = got.next
                if cursor is None:
                    break
            # else the same page again: what was delivered is gone from it
        return Delivered(count, refused=list(dict.fromkeys(refused)))
    wanted, found = set(ids), []
    for _ in range(DELIVER_PAGES):
        got = page(cursor)
        found += [e for e in got.entries if e.message_id in wanted]
        cursor = got.next
        if cursor is None or len({e.message_id for e in found}) == len(wanted):
            break
    refused = [e.message_id for e in found if e.unreadable]
    readable = [e for e in found if not e.unreadable]
    done = [e.message_id for e in readable if deliver_entry(scripts, keys, consumer, e) is not None]
    missing = [i for i in dict.fromkeys(ids) if i not in set(done) and i not in set(refused)]
    return Delivered(len(done), done, missing, refused)


def purge_consumer(
    client: RedisClient, scripts: Scripts, keys: QueueKeys, consumer: str, *, history: bool = False
) -> tuple[int, int]:
    """Discard everything waiting for logical consumer ``consumer``: its backlog in the log
    (it moves to the end of the log, as a replay to "latest"), its retries and its
    private input not yet delivered. In-flight messages finish as usual; other
    consumers, delayed messages and dead letters are not touched.

    An ordered consumer's waiting messages go too, and its keys are freed: a message
    of a key whose holder is still in flight may then start beside it.

    Returns:
        ``(retries removed, private-input and waiting entries removed)``.

    Raises:
        redis.ResponseError: NOGROUP when ``consumer`` is not registered.
    """
    gkeys = keys.group(consumer)
    # The log first (with its `reset` event when history is on), then its own keys.
    redelivery.reset(client, gkeys, StartPoint.parse("latest").to_last_delivered_id(), history)
    retries = direct = 0
    for _ in range(PURGE_CALLS):
        r, d, more = scripts("purge_consumer", [gkeys.retry, gkeys.direct], [consumer, PURGE_BATCH])
        retries, direct = retries + int(r), direct + int(d)
        if not int(more):
            break
    # An ordered consumer: the messages waiting behind its keys go too, and a key held
    # by a purged message is freed (nothing to do for another consumer).
    _, dropped = ordered.after_purge(scripts, gkeys)
    return retries, direct + dropped


class Ended(NamedTuple):
    """What :func:`end_message` did: ``outcome`` is ``ended``, ``marked`` (a message
    waiting in the log: its consumers' workers make it a dead letter, or delete it,
    when they read it, instead of running it: ``core/ended.py``), ``gone`` (it no
    longer waits there), ``in_flight`` (a private-input entry its consumer read
    meanwhile: its instance settles it) or ``read`` (a log entry the consumer read
    already: in flight or handled); ``entry`` is what was ended (None when not found);
    ``consumers``: for ``marked``, the logical consumers it was marked for."""

    outcome: str
    entry: browse.Entry | None = None
    consumers: tuple[str, ...] = ()


#: Where a message can be ended: its kinds of refs (``browse.Entry.ref``).
ENDABLE = (members.S_DELAYED, members.S_RETRY, members.S_DIRECT, members.S_LOG)


def end_message(
    client: RedisClient,
    scripts: Scripts,
    keys: QueueKeys,
    consumer: str | None,
    ref: str,
    *,
    by: str = "",
    delete: bool = False,
) -> Ended:
    """End the message ``ref`` names before its time (``end_message.lua``): a poison
    message an operator gives up on, without waiting for its retries.

    * a retry of ``consumer`` or an entry of its private input not yet read becomes
      ``consumer``'s dead letter (reason ``ended``, its last error kept), or is deleted
      with ``delete``. When it holds its ordering key (an ordered consumer's poison
      message retrying), the key passes to the key's next waiting message, in order;
    * a delayed message (``consumer`` None) becomes a dead letter of every logical
      consumer of the queue, each of which can then retry it, or is deleted.

    * a message waiting in the log (the log is shared: it stays there) is *marked* for
      ``consumer`` (None: for every logical consumer that has not read it yet), and
      their workers make it a dead letter (reason ``ended``) or delete it when they
      read it, instead of running it (``end_waiting.lua``, ``core/ended.py``): outcome
      ``marked``; ``read`` when the consumers read it already.

    Raises:
        ValueError: ``ref`` names no message that can be ended, or the consumer holds
            too many marks already (``ended.MOST``).
        CorruptState: another client wrote what the script reads (nothing done).
    """
    where = ref.partition(":")[0]
    if where not in ENDABLE or (where not in (members.S_DELAYED, members.S_LOG) and not consumer):
        raise ValueError(
            "Only a delayed message, a message waiting in the log, a retry or a message of a "
            f"consumer's private input can be ended, not {ref!r}."
        )
    entry = browse.find(client, keys, consumer, ref)
    if entry is None:
        return Ended("gone")
    if where == members.S_LOG:
        return _mark(client, scripts, keys, consumer, entry, by=by, delete=delete)
    if where == members.S_DELAYED:
        place, dead_of = keys.delayed, ([] if delete else group_names(client, keys))
        # A delayed message holds no ordering key yet: the hand-over's keys go unread.
        handover, prefix = [keys.delayed] * 3, ""
    else:
        gkeys = keys.group(consumer or "")
        place = gkeys.retry if where == members.S_RETRY else gkeys.direct
        dead_of = [] if delete else [consumer or ""]
        handover, prefix = [gkeys.holders, gkeys.direct, gkeys.held_back], gkeys.waiting_prefix
    failure = Failure.ended(by, entry.last_error)
    letter = dead_fields(
        entry.fields, consumer="", reason=DeadReason.ENDED, failure=failure, failed_at_ms=now_ms()
    )
    try:
        reply = scripts(
            "end_message",
            [place, *handover, *(keys.group(name).dead for name in dead_of)],
            [
                entry.member if where != members.S_DIRECT else entry.key,
                consumer if where == members.S_DIRECT else "",
                prefix,
                entry.ordering_key or "",
                entry.message_id,
                *dead_of,
                *(x for pair in letter.items() for x in pair),
            ],
        )
    except redis.ResponseError as exc:
        if error_code(exc) == "REDISQ_CORRUPT":
            raise CorruptState(exc) from None
        raise
    return Ended({1: "ended", 0: "gone", -1: "in_flight"}[int(reply)], entry)


def _mark(
    client: RedisClient,
    scripts: Scripts,
    keys: QueueKeys,
    consumer: str | None,
    entry: browse.Entry,
    *,
    by: str,
    delete: bool,
) -> Ended:
    """:func:`end_message` of log entry ``entry``: marked for ``consumer``, or for every
    logical consumer that has not read it (``core/ended.py``)."""
    mark = ended.Mark(delete, "" if delete else Failure.ended(by).message)
    marked: list[str] = []
    replies = []
    for name in [consumer] if consumer else group_names(client, keys):
        reply = ended.mark(scripts, keys.group(name), entry.key, mark)
        if reply == ended.FULL:
            raise ValueError(
                f"Consumer {name!r} holds {ended.MOST} messages ended before it read them "
                "already: let its workers read them first."
            )
        if reply == ended.MARKED:
            marked.append(name)
        replies.append(reply)
    if marked:
        return Ended("marked", entry, tuple(marked))
    return Ended("read" if ended.READ in replies else "gone", entry)
