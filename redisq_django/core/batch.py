"""Many commands in one write and one read pass: the batch sender behind ``Broker.send``.

redis-py's pipeline spends several microseconds per command in Python (a command stack,
per-argument encoding, a response callback per reply): more than Redis itself spends on
an ``XADD``. Batches of messages are our hot path (``publish_many``, the transaction's
batch after a commit, the outbox relay, the Spark writer and replay), so they are packed
here with hiredis' C encoder and written to one connection at once; the replies are read
back in order. Clients without a single connection pool (a Redis Cluster client) go
through redis-py's pipeline, which routes to the slot's node; all of a queue's keys share
one hash tag, so one batch touches one node either way.

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

from redisq_django.core.scripts import ScriptName, Scripts
from redisq_django.core.types import RedisClient

Command = Sequence[Any]

_MULTI = pack_command(("MULTI",))
_EXEC = pack_command(("EXEC",))
_SKIP_COMMAND: Any = ("CLIENT", "REPLY", "SKIP")
_SKIP = pack_command(_SKIP_COMMAND)


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
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        with client.pipeline(transaction=transaction) as pipe:
            for command in (*commands, *quiet):
                pipe.execute_command(*command)
            replies = list(pipe.execute(raise_on_error=False))
        return _checked(replies[: len(commands)], raise_on_error)
    connection = pool.get_connection()
    complete = False  # every reply read: the connection may be reused
    try:
        packed = b"".join(pack_command(tuple(c)) for c in commands)
        if transaction:
            packed += b"".join(pack_command(tuple(c)) for c in quiet)
            packed = _MULTI + packed + _EXEC
        else:
            packed += b"".join(_SKIP + pack_command(tuple(c)) for c in quiet)
        connection.send_packed_command([packed])
        outcome: list[Any] | Exception
        if transaction:
            outcome = _read_transaction(connection, len(commands) + len(quiet))
        else:
            outcome = [_read_one(connection) for _ in commands]
        complete = True
    finally:
        if not complete:  # unread replies would answer the next user's commands
            connection.disconnect()
        pool.release(connection)
    if isinstance(outcome, Exception):
        raise outcome
    return _checked(outcome[: len(commands)], raise_on_error)


def _checked(replies: list[Any], raise_on_error: bool) -> list[Any]:
    if raise_on_error:
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
    return replies


def _read_one(connection: Any) -> Any:
    try:
        return connection.read_response()
    except redis.ResponseError as exc:  # read and consumed: the next reply follows
        return exc


def _read_transaction(connection: Any, count: int) -> list[Any] | Exception:
    """The ``EXEC`` reply after ``+OK`` and ``count`` ``+QUEUED``, or the error to raise:
    a command refused while queued (``-OOM``, a wrong arity) aborts the transaction."""
    queued = [_read_one(connection) for _ in range(count + 1)]
    reply = _read_one(connection)
    refused = [r for r in queued if isinstance(r, Exception)]
    if refused:
        return refused[0]
    if isinstance(reply, Exception):
        return reply
    if reply is None or len(reply) != count:  # WATCH is never used here
        return redis.ResponseError(f"EXEC answered {reply!r} to {count} commands")
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
    try:
        return run_batch(client, [command], transaction=False, quiet=quiet)[0]
    except redis.exceptions.NoScriptError:
        scripts.load(name)
        return run_batch(client, [command], transaction=False)[0]
