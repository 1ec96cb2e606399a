"""Commands written to one pooled connection without waiting, replies read back in order.

The one pipelining layer under the batch sender (``core/batch.py``), the worker's
acknowledgements (``core/worker/acks.py``) and the task writes (``core/tasks/pipe.py``).
redis-py's pipeline spends several microseconds per command in Python (a command stack,
per-argument encoding, a callback per reply), more than Redis spends on an ``XACK``:
these paths pack their commands with hiredis' C encoder (often once, ahead of time) and
write them to a connection of their own, reading the replies when they choose.

A :class:`Pipe` owns that connection and the bookkeeping every user needs:

* which replies are unread, in order, each with the caller's tag (:class:`Expect`);
* each reply on its own: an error reply (``-ERR``, ``-NOSCRIPT``, ``-BUSY``…) is returned
  in its place as the exception, and the replies after it are read as usual;
* a lost connection (or a failed write): the connection is discarded (its unread
  replies would answer the next user's commands) and every reply it owed comes back as
  that exception, since whether those commands ran is unknown;
* NOSCRIPT (Redis restarted and lost its scripts, or a fresh server): the script is
  loaded and exactly the refused calls are sent again, in their order. A refused call
  never ran, so nothing runs twice; only calls their caller marked with the script's name
  are sent again (a script inside ``MULTI``/``EXEC`` is not: it would no longer be
  atomic with the rest of the transaction).

Clients without one connection pool (a Redis Cluster client) have no single connection
to pipeline on (:attr:`Pipe.available` is False): their callers go through redis-py.

Replies are read with the connection's hiredis reader directly when it has one (RESP2,
redis-py's hiredis parser: the default with ``redis[hiredis]``): redis-py's
``read_response`` costs ~1.5 µs of Python per reply around hiredis' own call, and a
batch of 500 messages is 502 replies (bench/RESULTS.md, issue 37). The socket is still
read by redis-py's parser (its timeouts, its errors); any other parser, RESP3 (push
messages between replies) or a redis-py without those parts is read reply by reply as
before (:func:`_hiredis_reader`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

import hiredis
import redis
from hiredis import pack_command

from redisq_django.core.scripts import ScriptName, Scripts
from redisq_django.core.types import RedisClient

T = TypeVar("T")


def packed(command: Sequence[Any]) -> bytes:
    """One command in RESP, e.g. ``packed(("XACK", key, group, entry_id))``."""
    return bytes(pack_command(tuple(command)))


#: Sent before a command whose reply nobody reads: Redis sends none for it.
SKIP_REPLY = packed(("CLIENT", "REPLY", "SKIP"))


def skipping_replies(commands: Iterable[Sequence[Any]]) -> bytes:
    """``commands`` packed, each after a ``CLIENT REPLY SKIP``: no reply to read back.

    A tuple of commands (immutable: a trend counter's, the same for a minute of
    publishes) is packed once and remembered.
    """
    if isinstance(commands, tuple):
        found = _skipping.get(id(commands))
        if found is not None and found[0] is commands:
            return found[1]
    data = b"".join(SKIP_REPLY + pack_command(tuple(c)) for c in commands)
    if isinstance(commands, tuple):
        if len(_skipping) >= _SKIPPING_KEPT:
            _skipping.clear()
        _skipping[id(commands)] = (commands, data)  # holding it: its id stays its own
    return data


#: :func:`skipping_replies` of tuples, by id: a few per queue and minute.
_skipping: dict[int, tuple[object, bytes]] = {}
_SKIPPING_KEPT = 256


class Expect(NamedTuple, Generic[T]):
    """One reply a write expects.

    Attributes:
        tag: the caller's, returned with the reply (the messages an ack settles, the
            script a task write called…).
        script: the script a call runs, when it may be sent again after a NOSCRIPT
            reply (the call never ran then); None: never sent again.
        command: that call, packed (sent again as it is: the script's SHA is the same).
    """

    tag: T
    script: ScriptName | None = None
    command: bytes = b""


#: An :class:`Expect`'s fields: tag, script, command.
_Pending = tuple[T, ScriptName | None, bytes]


class Pipe(Generic[T]):
    """Writes to one connection of ``client``'s pool, replies read later (not
    thread-safe: one per thread).

    Args:
        client: a redis-py client with one connection pool.
        scripts: its scripts, to load after a NOSCRIPT reply (needed only when writes
            mark calls with a script name).
    """

    def __init__(self, client: RedisClient, scripts: Scripts | None = None) -> None:
        self.client = client
        self.scripts = scripts
        self._pool: Any = getattr(client, "connection_pool", None)
        self._conn: Any = None
        # Each unread reply as an Expect's fields (a plain tuple: one per message on the
        # worker's hot path), in the order Redis answers them.
        self._unread: list[_Pending[T]] = []
        #: Replies known without reading (a write failed): returned by the next read.
        self._known: list[tuple[_Pending[T], Any]] = []

    @property
    def available(self) -> bool:
        """Whether the client has one connection pool to pipeline on."""
        return self._pool is not None

    @property
    def unread(self) -> int:
        """Replies written for and not read back yet."""
        return len(self._unread) + len(self._known)

    def tags(self) -> list[T]:
        """The tags of the replies not read back yet, in order."""
        return [e[0] for e, _ in self._known] + [e[0] for e in self._unread]

    def write(self, data: bytes, expect: Sequence[_Pending[T]] = ()) -> None:
        """Send ``data`` (packed commands) now, without waiting: Redis answers with the
        replies ``expect`` lists, in order (commands after a ``CLIENT REPLY SKIP`` get
        none), read by a later :meth:`read`.

        Raises:
            redis.ConnectionError, redis.TimeoutError: the write failed. The connection
                is discarded; the replies it owed (this write's too) come back from the
                next :meth:`read` as this exception.
        """
        if self._conn is None:
            self._conn = self._pool.get_connection()
        self._unread += expect
        try:
            # No health check: a PING would read a reply meant for an earlier write.
            self._conn.send_packed_command([data], check_health=False)
        except BaseException as exc:
            self._lose(exc)
            raise

    def write_one(
        self, data: bytes, tag: T, script: ScriptName | None = None, command: bytes = b""
    ) -> None:
        """:meth:`write` of commands that expect one reply, ``Expect(tag, script,
        command)`` (the hot path's: no ``Expect`` object made)."""
        if self._conn is None:
            self._conn = self._pool.get_connection()
        self._unread.append((tag, script, command))
        try:
            self._conn.send_packed_command([data], check_health=False)
        except BaseException as exc:
            self._lose(exc)
            raise

    def read(self) -> list[tuple[T, Any]]:
        """Read every unread reply: ``(tag, reply)`` in the order written, an error
        reply or a lost connection as the exception in its place. Calls refused with
        NOSCRIPT that were marked with their script are sent again first (once), and
        their new replies stand in their place."""
        pending, replies, refused = self._collect()
        if refused:
            self._rerun_refused(pending, replies, refused)
        return [(p[0], r) for p, r in zip(pending, replies, strict=True)]

    def read_replies(self) -> list[Any]:
        """:meth:`read`, the replies alone."""
        pending, replies, refused = self._collect()
        if refused:
            self._rerun_refused(pending, replies, refused)
        return replies

    def release(self) -> None:
        """Give the connection back to the pool (closed first when replies are unread:
        they would answer the next user's commands)."""
        if self._conn is None:
            return
        if self._unread:
            self._lose(redis.ConnectionError("the connection was given back unread"))
            return
        self._pool.release(self._conn)
        self._conn = None

    # -- internals ---------------------------------------------------------------------

    def _rerun_refused(
        self, pending: list[_Pending[T]], replies: list[Any], refused: list[int]
    ) -> None:
        """Send again the calls refused with NOSCRIPT (``refused``: their indexes) that
        were marked with their script."""
        rerun = [i for i in refused if pending[i][1] is not None]
        if rerun and self.scripts is not None:
            self._rerun(pending, replies, rerun, self.scripts)

    def _collect(self) -> tuple[list[_Pending[T]], list[Any], list[int]]:
        """The replies known already, then every unread one, read in order: what each
        was for, it, and which were NOSCRIPT."""
        # Known first: a failed write discarded the connection, so they came before.
        pending: list[_Pending[T]] = []
        replies: list[Any] = []
        if self._known:
            known, self._known = self._known, []
            pending = [p for p, _ in known]
            replies = [r for _, r in known]
        refused: list[int] = []
        unread, self._unread = self._unread, []
        pending += unread
        start = len(replies)
        try:
            fast = _hiredis_reader(self._conn) if unread else None
            if fast is not None:
                _read_replies(self._conn, *fast, len(unread), replies, refused)
            else:
                for _ in unread:
                    try:
                        replies.append(self._conn.read_response())
                    except redis.ResponseError as exc:  # read and consumed: the next follows
                        if isinstance(exc, redis.exceptions.NoScriptError):
                            refused.append(len(replies))
                        replies.append(exc)
        except BaseException as exc:  # lost: what the rest did is unknown
            n = len(replies) - start
            self._unread = unread[n:]
            self._lose(exc)
            if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit
                # What was read stays for the next read.
                self._known[:0] = list(zip(pending, replies, strict=False))
                raise
            replies += [exc] * (len(unread) - n)
            self._known = []
        return pending, replies, refused

    def _rerun(
        self, pending: list[_Pending[T]], replies: list[Any], rerun: list[int], scripts: Scripts
    ) -> None:
        calls = [pending[i] for i in rerun]
        try:
            for name in dict.fromkeys(script for _, script, _ in calls):
                assert name is not None
                scripts.load(name)
            self.write(b"".join(command for _, _, command in calls), calls)
        except Exception as exc:  # not loaded or not written: they did not run
            for i in rerun:
                replies[i] = exc
            self._known = []  # the failed write's replies: the ones set here
            return
        for i, reply in zip(rerun, self._collect()[1], strict=True):
            replies[i] = reply

    def _lose(self, exc: BaseException) -> None:
        """Discard the connection; every reply it owed becomes ``exc``."""
        self._known += [(expect, exc) for expect in self._unread]
        self._unread = []
        if self._conn is not None:
            self._conn.disconnect()
            self._pool.release(self._conn)
            self._conn = None


try:  # what redis-py's hiredis reader answers when a reply is not all there yet
    from redis._parsers.hiredis import NOT_ENOUGH_DATA as _NOT_ENOUGH
except ImportError:  # a redis-py without it keeps hiredis' own False (never a RESP2 reply)
    _NOT_ENOUGH = False

#: hiredis' type for a RESP3 push message (hiredis 3.2 on).
_PUSH: Any = getattr(hiredis, "PushNotification", None)


def _hiredis_reader(conn: Any) -> tuple[Any, Any, Any] | None:
    """The hiredis reader of ``conn``, its parser's socket read and, under RESP3, its
    push-message handler, when its replies can be read from the reader directly (see
    the module's docstring); else None."""
    parser = getattr(conn, "_parser", None)
    reader = getattr(parser, "_reader", None)
    fill = getattr(parser, "read_from_socket", None)
    if not isinstance(reader, hiredis.Reader) or fill is None:
        return None
    if str(getattr(conn, "protocol", 2)) != "3":
        return reader, fill, None
    # RESP3 (redis-py 8's default): a push message (an invalidation, a maintenance
    # notice) may come between replies, handed to the parser as read_response does;
    # and False is a reply there, so "not enough data" must be redis-py's own marker.
    push = getattr(parser, "handle_push_response", None)
    if _PUSH is None or push is None or _NOT_ENOUGH is False:
        return None
    return reader, fill, push


def _read_replies(
    conn: Any,
    reader: Any,
    fill: Any,
    push: Any,
    count: int,
    replies: list[Any],
    refused: list[int],
) -> None:
    """Read ``count`` replies into ``replies`` from ``reader``, the socket read by
    ``fill`` when it needs more, push messages handed to ``push``; an error reply in its
    place (and its index in ``refused`` when NOSCRIPT), as ``read_response`` would have
    raised it.

    Raises:
        redis.ConnectionError, redis.TimeoutError: the connection failed (``conn``
            disconnected, as ``read_response`` leaves it).
    """
    gets = reader.gets
    append = replies.append
    end = len(replies) + count
    try:
        while len(replies) < end:
            reply = gets()
            if reply is _NOT_ENOUGH:
                fill()
                continue
            if isinstance(reply, Exception):
                if isinstance(reply, redis.ConnectionError):  # a protocol error
                    raise reply
                if isinstance(reply, redis.exceptions.NoScriptError):
                    refused.append(len(replies))
            elif push is not None and isinstance(reply, _PUSH):
                push(reply)  # not a reply to a command of ours
                continue
            append(reply)
    except OSError as exc:  # the socket's own (reset): redis-py's error, as it raises it
        conn.disconnect()
        raise redis.ConnectionError(f"Error while reading from Redis: {exc}") from exc
    except BaseException:
        conn.disconnect()
        raise
