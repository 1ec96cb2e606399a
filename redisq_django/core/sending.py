"""Sending prepared envelopes to one queue in one round trip (``Broker.send``), with the
queue's ``published`` trend counter in the same write (``core/trends.py``): planned once
(:class:`QueueSend`), run by the synchronous client here or by an asyncio one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from redisq_django.core import partitions, trends
from redisq_django.core.batch import Command, run_batch, run_script, run_scripts
from redisq_django.core.envelope import Envelope, content_fields
from redisq_django.core.keys import GroupKeys, QueueKeys
from redisq_django.core.scripts import ScriptName, Scripts
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


def _published(keys: QueueKeys, n: int, trends_on: bool) -> Sequence[Command]:
    """The trend counter of ``n`` messages published to the queue (none when off)."""
    return trends.counter(keys).published(n) if trends_on else ()


# Not frozen: a frozen dataclass costs several times as much to build, once per publish.
@dataclass(slots=True)
class QueueSend:
    """Sending one queue's envelopes, built once by the core (:func:`plan_queue`) and run
    by either client: the synchronous one (:func:`run_send`) or an asyncio one
    (``core.asyncio_client.run_send``). Nothing of the wire is built twice.

    Attributes:
        keys: the queue's keys.
        commands: plain commands (``XADD``/``ZADD``) whose replies are the result...
        transaction: ...sent in ``MULTI``/``EXEC`` (all or none).
        script: else the script called, once per ``calls`` item...
        calls: ...each its ``(KEYS, ARGV)``.
        each: one reply per call, an error reply raised (``publish_once``); False: one
            call whose reply is the list of replies (``publish_delayed``).
        quiet: commands in the same round trip whose replies are not read (the trend
            counter, a queue's registration).
        ids: the result instead of the replies (message ids known beforehand).
        counted: the trend counter rides along (forgotten when the send fails).
        check: the queue's base keys and the number of partitions this process routes
            by, when it has not compared that number with Redis's record yet: the
            runner does so first (``partitions.checking``, its steps run by either
            client), so that a first write is not refused for a layout Redis lost (and
            its trend counter not counted twice). Every write is checked again where
            it happens regardless.
    """

    keys: QueueKeys
    commands: list[Command] = field(default_factory=list)
    transaction: bool = False
    script: ScriptName | None = None
    calls: list[tuple[list[str], list[Any]]] = field(default_factory=list)
    each: bool = False
    quiet: Sequence[Command] = ()
    ids: list[str] | None = None
    counted: bool = False
    check: tuple[QueueKeys, int] | None = None

    def failed(self) -> None:
        """The send failed: its trend counter's ``EXPIRE`` may be lost, send it again."""
        if self.counted:
            trends.counter(self.keys).forget()


def run_send(client: RedisClient, scripts: Scripts, s: QueueSend) -> list[Any]:
    """Run ``s`` on the synchronous client: one reply per envelope (see
    :class:`QueueSend`), errors raised."""
    if s.check is not None:
        partitions.recorded(client, scripts, *s.check)
    try:
        if s.script is None:
            # The common publish, one message: no MULTI around one command (and its counter)
            replies = run_batch(client, s.commands, transaction=s.transaction, quiet=s.quiet)
        elif not s.each:
            keys, args = s.calls[0]
            replies = list(run_script(client, scripts, s.script, keys, args, quiet=s.quiet))
        else:
            replies = run_scripts(client, scripts, s.script, s.calls, quiet=s.quiet)
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
    except BaseException:
        s.failed()
        raise
    return replies if s.ids is None else s.ids


def plan_queue(
    keys: QueueKeys,
    envelopes: list[Envelope],
    *,
    once: bool = False,
    batch: str | None = None,
    trends_on: bool = False,
    quiet: Sequence[Command] = (),
) -> QueueSend:
    """How to send envelopes of one queue: at most once per batch id (``batch``), per
    message id (``once``), or plainly; with ``trends_on``, counted in the same write;
    ``quiet``: more commands for the same round trip."""
    if batch is not None:
        s = plan_batch_once(keys, envelopes, batch, trends_on=trends_on)
    elif once:
        s = plan_once(keys, envelopes, trends_on=trends_on)
    else:
        s = plan_all(keys, envelopes, trends_on=trends_on)
    if quiet:
        s.quiet = [*s.quiet, *quiet]  # never extended in place: a counter's may be shared
    return s


def plan_all(keys: QueueKeys, envelopes: list[Envelope], *, trends_on: bool = False) -> QueueSend:
    """XADD (or ZADD when delayed) every envelope of one queue, all or none (MULTI),
    with the ``published`` trend counter in the same write; the replies are the entry
    ids of immediate messages.

    A batch holding a ``delay=`` message, and every send to a partition, goes through
    ``publish_delayed.lua`` instead (still all or none): it makes delays due times by
    Redis's clock, and checks the partition's layout before it writes (a queue's own
    keys need no check here: a plain write to a queue partitioned since meets its fence).
    """
    counted = _published(keys, len(envelopes), trends_on)
    if keys.part is not None or any(e.delay_ms is not None for e in envelopes):
        return QueueSend(
            keys,
            script="publish_delayed",
            calls=[_delayed_call(keys, keys.log, envelopes)],
            quiet=counted,
            counted=bool(counted),
        )
    if len(envelopes) == 1:  # one publish: the hot path
        return QueueSend(keys, [_command(keys, envelopes[0])], quiet=counted, counted=bool(counted))
    commands: list[Command] = [_command(keys, e) for e in envelopes]
    return QueueSend(
        keys,
        commands=commands,
        transaction=len(commands) > 1,
        quiet=counted,
        counted=bool(counted),
    )


def _delayed_call(
    keys: QueueKeys, log: str, envelopes: Sequence[Envelope], *, now: bool = False
) -> tuple[list[str], list[Any]]:
    """The ``publish_delayed.lua`` call that writes ``envelopes`` (immediate ones to
    ``log``: the queue's, or a consumer's direct stream) into ``keys``' layout; with
    ``now``, every one at once, whatever its due time."""
    meta, k = keys.layout()
    args: list[Any] = [k, len(envelopes)]
    for e in envelopes:
        fields = e.fields()
        args += [0 if now else _due_arg(e), len(fields) // 2, *fields]
    return [meta, keys.delayed, log], args


def plan_immediate(
    keys: QueueKeys, payload_json: bytes, headers_json: bytes | None, *, trends_on: bool
) -> QueueSend:
    """:func:`plan_all` of one immediate message without an id of its own, from its
    encoded content: the path most publishes take, with no :class:`Envelope` built."""
    counted = _published(keys, 1, trends_on)
    command = ("XADD", keys.log, "*", *content_fields(payload_json, headers_json))
    return QueueSend(keys, [command], quiet=counted, counted=bool(counted))


def plan_batch_once(
    keys: QueueKeys,
    envelopes: list[Envelope],
    batch: str,
    *,
    trends_on: bool = False,
) -> QueueSend:
    """Publish every envelope of one queue, all or none, at most once per ``batch`` id
    (``publish_batch_once.lua``), in one round trip: sending the same batch again after
    an unknown outcome (a timeout, a lost connection) is safe, a no-op if it went through.

    Every envelope needs a message id of its own (the only way to know it afterwards).
    The result is the message ids in order.
    """
    meta, k = keys.layout()
    args: list[Any] = [k, BATCH_MARKER_TTL_MS, len(envelopes)]
    for e in envelopes:
        if e.id is None:
            raise ValueError("Publishing a batch at most once needs message ids of your own.")
        fields = e.fields()
        args += [_due_arg(e), len(fields) // 2, *fields]
    script_keys = [meta, keys.log, keys.delayed, keys.batch_marker(batch)]
    counted = _published(keys, len(envelopes), trends_on)
    return QueueSend(
        keys,
        script="publish_batch_once",
        calls=[(script_keys, args)],
        quiet=counted,
        ids=[e.id or "" for e in envelopes],
        counted=bool(counted),
    )


def plan_once(
    keys: QueueKeys,
    envelopes: list[Envelope],
    *,
    to: GroupKeys | None = None,
    trends_on: bool = False,
) -> QueueSend:
    """Publish every envelope of one queue at most once per message id
    (``publish_once.lua``), in one round trip: to the queue's log (or delayed set), or
    with ``to`` to that one logical consumer's private input (delays ignored), where
    "once" is per consumer (its own marker).

    Each script call is atomic on its own; after a failure, sending the whole batch again
    is safe because the ones that went through are no-ops the second time. (After a
    NOSCRIPT only the refused calls are sent again: ``batch.run_scripts``.) The result is
    the message ids in order.
    """

    meta, k = keys.layout()

    def call(e: Envelope) -> tuple[list[str], list[Any]]:
        if e.id is None:
            raise ValueError("Publishing at most once needs a message id of your own.")
        if to is not None:  # the script only XADDs to its log key and keeps the marker
            target = [meta, to.direct, keys.delayed, to.sent_marker(e.id)]
            return target, [k, SENT_MARKER_TTL_MS, 0, b"", *e.fields()]
        due = _due_arg(e)  # with "+<ms>" the script makes the member itself
        member = e.member() if due and e.delay_ms is None else b""
        return (
            [meta, keys.log, keys.delayed, keys.sent_marker(e.id)],
            [k, SENT_MARKER_TTL_MS, due, member, *e.fields()],
        )

    calls = [call(e) for e in envelopes]
    # Counted as published to the queue, not to one consumer.
    counted = _published(keys, len(envelopes), trends_on and to is None)
    return QueueSend(
        keys,
        script="publish_once",
        calls=calls,
        each=True,
        quiet=counted,
        ids=[e.id or "" for e in envelopes],
        counted=bool(counted),
    )


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
    """Send envelopes of one queue (:func:`plan_queue`, then :func:`run_send`). Returns
    one reply per envelope."""
    s = plan_queue(keys, envelopes, once=once, batch=batch, trends_on=trends_on)
    return run_send(client, scripts, s)


def send_once(
    client: RedisClient,
    scripts: Scripts,
    keys: QueueKeys,
    envelopes: list[Envelope],
    *,
    to: GroupKeys | None = None,
    trends_on: bool = False,
) -> list[Any]:
    """:func:`plan_once` run on the synchronous client (the message ids)."""
    return run_send(client, scripts, plan_once(keys, envelopes, to=to, trends_on=trends_on))


def send_direct(
    client: RedisClient, scripts: Scripts, gkeys: GroupKeys, envelopes: list[Envelope]
) -> list[str]:
    """XADD envelopes to one logical consumer's private input, all or none
    (``publish_delayed.lua``, which checks the layout first: targeted replay is rare, and
    a consumer's input where its instances no longer read would strand them).

    Returns:
        The new entry ids, in order.
    """
    with_ids = [e.with_id() for e in envelopes]
    keys, args = _delayed_call(gkeys.queue_keys, gkeys.direct, with_ids, now=True)
    return [to_str(r) for r in run_script(client, scripts, "publish_delayed", keys, args)]
