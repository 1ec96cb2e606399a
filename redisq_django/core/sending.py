"""Sending prepared envelopes to one queue in one round trip (``Broker.send``), with the
queue's ``published`` trend counter in the same write (``core/trends.py``)."""

from __future__ import annotations

from typing import Any

from redisq_django.core import trends
from redisq_django.core.batch import Command, run_batch, run_script, run_scripts
from redisq_django.core.envelope import Envelope
from redisq_django.core.keys import GroupKeys, QueueKeys
from redisq_django.core.scripts import Scripts
from redisq_django.core.types import RedisClient
from redisq_django.core.wire import to_str

#: How long Redis remembers that a message id was published once (ms): 1 day.
SENT_MARKER_TTL_MS = 24 * 3600 * 1000

#: How long Redis remembers that a batch id was published (ms): 10 minutes. A batch is
#: sent again only within seconds (a retry after a timeout); one marker per committed
#: transaction and queue must not pile up for a day.
BATCH_MARKER_TTL_MS = 10 * 60 * 1000


def _command(keys: QueueKeys, e: Envelope) -> tuple[Any, ...]:
    if e.due_at_ms is None:
        return ("XADD", keys.log, "*", *e.fields())
    return ("ZADD", keys.delayed, e.due_at_ms, e.member())


def _due_arg(e: Envelope) -> str | int:
    """A script's due argument: "+<ms>" for a delay (Redis adds its own clock's now),
    else the due time (an eta), or 0 for "now"."""
    if e.delay_ms is not None:
        return f"+{e.delay_ms}"
    return e.due_at_ms or 0


def _published(keys: QueueKeys, n: int, trends_on: bool) -> list[Command]:
    """The trend counter of ``n`` messages published to the queue (none when off)."""
    return trends.counter(keys).commands({trends.PUBLISHED: n}) if trends_on else []


def send_all(
    client: RedisClient,
    keys: QueueKeys,
    envelopes: list[Envelope],
    scripts: Scripts,
    *,
    trends_on: bool = False,
) -> list[Any]:
    """XADD (or ZADD when delayed) every envelope of one queue, all or none (MULTI),
    with the ``published`` trend counter in the same write.

    A batch holding a ``delay=`` message goes through ``publish_delayed.lua`` instead
    (still all or none), which makes delays due times by Redis's clock.

    Returns:
        The replies in order: entry ids for immediate messages.
    """
    counted = _published(keys, len(envelopes), trends_on)
    try:
        if any(e.delay_ms is not None for e in envelopes):
            args: list[Any] = [len(envelopes)]
            for e in envelopes:
                fields = e.fields()
                args += [_due_arg(e), len(fields) // 2, *fields]
            to = [keys.delayed, keys.log]
            return list(run_script(client, scripts, "publish_delayed", to, args, quiet=counted))
        commands = [_command(keys, e) for e in envelopes]
        # The common publish, one message: no MULTI around one command (and its counter)
        return run_batch(client, commands, transaction=len(commands) > 1, quiet=counted)
    except BaseException:
        if counted:
            trends.counter(keys).forget()
        raise


def send_queue(
    client: RedisClient,
    scripts: Scripts,
    keys: QueueKeys,
    envelopes: list[Envelope],
    *,
    once: bool = False,
    batch: str | None = None,
    trends_on: bool = False,
) -> list[Any]:
    """Send envelopes of one queue: at most once per batch id (``batch``), per message id
    (``once``), or plainly (:func:`send_all`); with ``trends_on``, count them in the same
    write. Returns one reply per envelope."""
    if batch is not None:
        return send_batch_once(client, scripts, keys, envelopes, batch, trends_on=trends_on)
    if once:
        return send_once(client, scripts, keys, envelopes, trends_on=trends_on)
    return send_all(client, keys, envelopes, scripts, trends_on=trends_on)


def send_batch_once(
    client: RedisClient,
    scripts: Scripts,
    keys: QueueKeys,
    envelopes: list[Envelope],
    batch: str,
    *,
    trends_on: bool = False,
) -> list[Any]:
    """Publish every envelope of one queue, all or none, at most once per ``batch`` id
    (``publish_batch_once.lua``), in one round trip: sending the same batch again after
    an unknown outcome (a timeout, a lost connection) is safe, a no-op if it went through.

    Every envelope needs a message id of its own (the only way to know it afterwards).

    Returns:
        The message ids in order.
    """
    args: list[Any] = [BATCH_MARKER_TTL_MS, len(envelopes)]
    for e in envelopes:
        if e.id is None:
            raise ValueError("Publishing a batch at most once needs message ids of your own.")
        fields = e.fields()
        args += [_due_arg(e), len(fields) // 2, *fields]
    script_keys = [keys.log, keys.delayed, keys.batch_marker(batch)]
    counted = _published(keys, len(envelopes), trends_on)
    try:
        run_script(client, scripts, "publish_batch_once", script_keys, args, quiet=counted)
    except BaseException:
        if counted:
            trends.counter(keys).forget()
        raise
    return [e.id for e in envelopes]


def send_once(
    client: RedisClient,
    scripts: Scripts,
    keys: QueueKeys,
    envelopes: list[Envelope],
    *,
    to: GroupKeys | None = None,
    trends_on: bool = False,
) -> list[Any]:
    """Publish every envelope of one queue at most once per message id
    (``publish_once.lua``), in one round trip: to the queue's log (or delayed set), or
    with ``to`` to that one logical consumer's private input (delays ignored), where
    "once" is per consumer (its own marker).

    Each script call is atomic on its own; after a failure, sending the whole batch again
    is safe because the ones that went through are no-ops the second time. (After a
    NOSCRIPT only the refused calls are sent again: ``batch.run_scripts``.)

    Returns:
        The message ids in order.
    """

    def call(e: Envelope) -> tuple[list[str], list[Any]]:
        if e.id is None:
            raise ValueError("Publishing at most once needs a message id of your own.")
        if to is not None:  # the script only XADDs to its first key and keeps the marker
            target = [to.direct, keys.delayed, to.sent_marker(e.id)]
            return target, [SENT_MARKER_TTL_MS, 0, b"", *e.fields()]
        due = _due_arg(e)  # with "+<ms>" the script makes the member itself
        member = e.member() if due and e.delay_ms is None else b""
        return (
            [keys.log, keys.delayed, keys.sent_marker(e.id)],
            [SENT_MARKER_TTL_MS, due, member, *e.fields()],
        )

    calls = [call(e) for e in envelopes]
    # Counted as published to the queue, not to one consumer.
    counted = _published(keys, len(envelopes), trends_on and to is None)
    try:
        replies = run_scripts(client, scripts, "publish_once", calls, quiet=counted)
    except BaseException:
        if counted:
            trends.counter(keys).forget()
        raise
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return [e.id for e in envelopes]


def send_direct(client: RedisClient, gkeys: GroupKeys, envelopes: list[Envelope]) -> list[str]:
    """XADD envelopes to one logical consumer's private input, all or none (MULTI).

    Returns:
        The new entry ids, in order.
    """
    commands = [("XADD", gkeys.direct, "*", *e.with_id().fields()) for e in envelopes]
    return [to_str(r) for r in run_batch(client, commands, transaction=True)]
