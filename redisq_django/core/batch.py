"""Many commands in one write and one read pass: the batch sender behind ``Broker.send``.

redis-py's pipeline spends several microseconds per command in Python (a command stack,
per-argument encoding, a response callback per reply): more than Redis itself spends on
an ``XADD``. Batches of messages are our hot path (``publish_many``, the transaction's
batch after a commit, the outbox relay, the Spark writer and replay), so they are packed
here with hiredis' C encoder and written to one connection at once, through the
pipelining layer (``core/pipelining.py``); the replies are read back in order. Clients
without a single connection pool (a Redis Cluster client) go through redis-py's
pipeline, which routes to the slot's node; all of a queue's keys share one hash tag, so
one batch touches one node either way.

Nothing is retried here: after a lost connection the outcome of the batch is unknown, and
only the caller knows whether sending again is safe (publish-once batches are).

Commands whose replies nobody needs (the trend counters, ``core/trends.py``) ride along
as ``quiet`` commands: inside the ``MULTI`` of a transaction, else each after a
``CLIENT REPLY SKIP``, so the batch still costs one write and its own replies only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from hiredis import pack_command

from redisq_django.core.pipelining import Expect, Pipe, packed, skipping_replies
from redisq_django.core.scripts import ScriptName, Scripts
from redisq_django.core.types import RedisClient

Command = Sequence[Any]

#: A reply expected, nobody's in particular.
_REPLY: Expect[None] = Expect(None)

_MULTI = packed(("MULTI",))
_EXEC = packed(("EXEC",))


def run_batch(
    client: RedisClient,
    commands: Sequence[Command],
    *,
    transaction: bool,
    raise_on_error: bool = True,
    quiet: Sequence[Command] = (),
) -> list[Any]:
    """Send ``commands`` in one write and return their replies, in order.

    Args:
        client: a redis-py client (``Redis``, or ``RedisCluster`` through its pipeline).
        commands: each a full command, e.g. ``("XADD", key, "*", b"payload", b"{}")``.
        transaction: wrap them in ``MULTI``/``EXEC`` (all or none).
        raise_on_error: raise the first error reply; otherwise error replies are
            returned in place, as exception objects.
        quiet: more commands for the same write, after ``commands``, whose replies
            (errors included) are not wanted: they are never returned nor raised.

    Raises:
        redis.ResponseError: a command was refused (the first error, with
            ``raise_on_error``; under ``transaction`` a command refused before ``EXEC``
            means none ran).
        redis.ConnectionError, redis.TimeoutError: the connection failed; whether the
            batch ran is unknown.
    """
    if getattr(client, "connection_pool", None) is None:
        with client.pipeline(transaction=transaction) as pipe:
            for command in (*commands, *quiet):
                pipe.execute_command(*command)
            replies = list(pipe.execute(raise_on_error=False))
        return _checked(replies[: len(commands)], raise_on_error)
    if transaction:  # +OK, a +QUEUED per command, then EXEC's array
        outcome = _transaction(_sent(client, *transaction_data(commands, quiet)))
    else:
        # The hot path (one publish is one command): no wrapper, no generator.
        if len(commands) == 1:
            data = pack_command(tuple(commands[0]))
        else:
            data = b"".join(pack_command(tuple(c)) for c in commands)
        outcome = _sent(client, data + skipping_replies(quiet) if quiet else data, len(commands))
    return _checked(outcome[: len(commands)], raise_on_error)


def transaction_data(
    commands: Sequence[Command], quiet: Sequence[Command] = ()
) -> tuple[bytes, int]:
    """``commands`` then ``quiet`` ones in ``MULTI``/``EXEC``, packed as :func:`run_batch`
    writes them, and how many replies Redis sends for them: for a caller that writes
    them itself (``core/ahead.py``) and reads the replies later
    (:func:`transaction_replies`)."""
    data = b"".join(pack_command(tuple(c)) for c in commands)
    data = _MULTI + data + b"".join(pack_command(tuple(c)) for c in quiet) + _EXEC
    return data, len(commands) + len(quiet) + 2


def transaction_replies(replies: list[Any], count: int) -> list[Any]:
    """The replies of the first ``count`` commands of a :func:`transaction_data` write,
    from all its replies.

    Raises:
        redis.ResponseError: a command was refused (before ``EXEC``: none ran).
    """
    return _checked(_transaction(replies)[:count], True)


def _sent(
    client: RedisClient,
    data: bytes,
    count: int,
    calls: Sequence[Expect[None]] = (),
    scripts: Scripts | None = None,
) -> list[Any]:
    """Write ``data`` and read its ``count`` replies (``calls``: what they are, when a
    NOSCRIPT may send one again); a lost connection is raised."""
    pipe: Pipe[None] = Pipe(client, scripts)
    try:
        pipe.write(data, calls or [_REPLY] * count)
    finally:
        replies = pipe.read_replies()
        pipe.release()
    # A lost connection is the reply of every command from the one it failed at.
    last = replies[-1] if replies else None
    if isinstance(last, BaseException) and not isinstance(last, redis.ResponseError):
        raise last  # what ran is unknown
    return replies


def _checked(replies: list[Any], raise_on_error: bool) -> list[Any]:
    if raise_on_error:
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
    return replies


def _transaction(replies: list[Any]) -> list[Any]:
    """The commands' replies from ``EXEC``'s, after ``+OK`` and their ``+QUEUED``; a
    command refused while queued (``-OOM``, a wrong arity) aborted the transaction."""
    count = len(replies) - 2
    reply = replies[-1]
    refused = [r for r in replies[:-1] if isinstance(r, Exception)]
    if refused:
        raise refused[0]
    if isinstance(reply, Exception):
        raise reply
    if reply is None or len(reply) != count:  # WATCH is never used here
        raise redis.ResponseError(f"EXEC answered {reply!r} to {count} commands")
    return list(reply)


def run_script(
    client: RedisClient,
    scripts: Scripts,
    name: ScriptName,
    keys: Sequence[Any],
    args: Sequence[Any],
    *,
    quiet: Sequence[Command] = (),
) -> Any:
    """Script ``name`` and ``quiet`` commands in one write (see :func:`run_batch`); the
    script's reply, raised when it is an error.

    After a NOSCRIPT reply (not loaded yet, or Redis restarted) the script is loaded and
    called again, alone: the quiet commands went through the first time.
    """
    command = scripts.command(name, keys, args)
    if getattr(client, "connection_pool", None) is None:
        try:
            return run_batch(client, [command], transaction=False, quiet=quiet)[0]
        except redis.exceptions.NoScriptError:
            scripts.load(name)
            return run_batch(client, [command], transaction=False)[0]
    call = packed(command)
    [reply] = _sent(client, call + skipping_replies(quiet), 1, [Expect(None, name, call)], scripts)
    return _checked([reply], True)[0]


def run_scripts(
    client: RedisClient,
    scripts: Scripts,
    name: ScriptName,
    calls: Sequence[tuple[Sequence[Any], Sequence[Any]]],
    *,
    quiet: Sequence[Command] = (),
) -> list[Any]:
    """Script ``name`` once per ``(KEYS, ARGV)`` of ``calls``, and ``quiet`` commands, in
    one write (see :func:`run_batch`); the replies in order, error replies in place.

    After NOSCRIPT replies the script is loaded and exactly the refused calls are sent
    again (they never ran; the others and the quiet commands did).

    Raises:
        redis.ConnectionError, redis.TimeoutError: the connection failed; whether the
            calls ran is unknown.
    """
    commands = [scripts.command(name, keys, args) for keys, args in calls]
    if getattr(client, "connection_pool", None) is None:  # through redis-py's pipeline
        replies = run_batch(client, commands, transaction=False, raise_on_error=False, quiet=quiet)
        refused = [
            i for i, r in enumerate(replies) if isinstance(r, redis.exceptions.NoScriptError)
        ]
        if refused:
            scripts.load(name)
            again = [commands[i] for i in refused]
            again_replies = run_batch(client, again, transaction=False, raise_on_error=False)
            for i, reply in zip(refused, again_replies, strict=True):
                replies[i] = reply
        return replies
    each = [packed(c) for c in commands]
    expect = [Expect(None, name, call) for call in each]
    return _sent(client, b"".join(each) + skipping_replies(quiet), len(each), expect, scripts)
