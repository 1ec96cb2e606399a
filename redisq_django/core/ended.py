"""Messages waiting in the log that an operator ended for one logical consumer.

The log is shared by every logical consumer, so an entry one of them must not run cannot
be taken out of it. It is *marked* instead: ``end_waiting.lua`` writes its entry id to
the consumer's ``ended`` hash, only while the consumer has not read it (its
last-delivered id is before it). Every read of the consumer's instances learns in its
own round trip whether that hash exists — an ``EXISTS`` pipelined after the plain
``XREADGROUP`` (:class:`LogReader`), a sixth reply element of an ordered consumer's
``read_ordered.lua`` — and only when it does, asks ``ended_marks.lua`` which of the log
entries just read (or taken over from a crashed instance) are marked. Those become dead
letters (reason ``ended``) or are acknowledged (``delete``) without running; then the
marks of the dead letters are removed (a deleted entry's mark is left to the sweep: an
acknowledgement does not check which instance holds the entry). So the hot path pays
one ``EXISTS`` in a round trip it makes anyway while nothing is marked, and a crash
anywhere leaves a marked entry pending with its mark: whoever takes it over asks again,
and never runs it.

A mark that can no longer apply (its entry handled by a client that does not honour
marks, skipped by a replay or a purge, or trimmed) is swept by ``ended_marks.lua``, a
few per call (:data:`SWEEP`); a consumer holds at most :data:`MOST` marks.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import redis

from redisq_django.core.errors import CorruptState, error_code, is_nogroup
from redisq_django.core.groups import read_group, recover_group
from redisq_django.core.keys import GroupKeys
from redisq_django.core.pipelining import Pipe, packed
from redisq_django.core.scripts import Scripts
from redisq_django.core.types import RedisClient
from redisq_django.core.wire import to_str

#: A consumer holds at most this many marks (``end_waiting.lua`` refuses one more).
MOST = 10_000
#: ``ended_marks.lua`` looks at up to this many other marks per call, to sweep stale ones.
SWEEP = 20

#: ``mode`` of a mark: its entry becomes a dead letter, or is acknowledged (deleted).
DEAD, DELETE = "dead", "delete"


class Mark(NamedTuple):
    """What becomes of a marked entry when its consumer reads it."""

    delete: bool
    error_message: str = ""

    def to_json(self) -> str:
        """The mark as stored: a JSON object of strings (PROTOCOL.md)."""
        if self.delete:
            return json.dumps({"mode": DELETE})
        return json.dumps({"mode": DEAD, "error_message": self.error_message})

    @classmethod
    def parse(cls, raw: bytes | str) -> Mark:
        """A stored mark; anything but a ``delete`` mark is a dead letter's (a mark that
        is not ours still ends its entry: never a run)."""
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            return cls(False, "ended by an operator before its time")
        if data.get("mode") == DELETE:
            return cls(True)
        message = data.get("error_message")
        return cls(False, message if isinstance(message, str) and message else "ended")


#: ``end_waiting.lua``'s replies.
MARKED, GONE, READ, NO_GROUP, FULL = 1, 0, -1, -2, -3


def mark(scripts: Scripts, gkeys: GroupKeys, entry_id: str, what: Mark) -> int:
    """Mark log entry ``entry_id`` ended for logical consumer ``gkeys``
    (``end_waiting.lua``): :data:`MARKED`, :data:`GONE` (not in the log), :data:`READ`
    (the consumer read it already), :data:`NO_GROUP` or :data:`FULL`.

    Raises:
        CorruptState: the ``ended`` hash is not a hash (nothing done).
    """
    try:
        reply = scripts(
            "end_waiting",
            [gkeys.queue_keys.log, gkeys.ended],
            [gkeys.group, entry_id, what.to_json(), MOST],
        )
    except redis.ResponseError as exc:
        if error_code(exc) == "REDISQ_CORRUPT":
            raise CorruptState(exc) from None
        raise
    return int(reply)


def marks_of(scripts: Scripts, gkeys: GroupKeys, entry_ids: list[bytes]) -> dict[bytes, Mark]:
    """The marks of ``entry_ids`` (log entries just read or taken over), by entry id; a
    few stale marks are swept on the way (``ended_marks.lua``)."""
    try:
        found, _ = scripts(
            "ended_marks", [gkeys.queue_keys.log, gkeys.ended], [gkeys.group, SWEEP, *entry_ids]
        )
    except redis.ResponseError as exc:
        if error_code(exc) == "REDISQ_CORRUPT":
            raise CorruptState(exc) from None
        raise
    return {e: Mark.parse(m) for e, m in zip(entry_ids, found, strict=True) if m}


def marked_ids(client: RedisClient, gkeys: GroupKeys) -> list[str]:
    """The log entry ids marked for ``gkeys`` (at most :data:`MOST`), oldest first."""
    ids = [to_str(i) for i in client.hkeys(gkeys.ended)]
    return sorted(ids, key=lambda i: tuple(int(p) for p in i.split("-")))


class LogReader:
    """``XREADGROUP`` of the log and the direct stream for one instance, with an
    ``EXISTS`` of its consumer's ``ended`` hash written in the same round trip (on a
    connection of the pool, hiredis-packed: ``core/pipelining.py``). A client without
    one pool (a cluster) reads as ``groups.read_group`` does, then asks ``EXISTS`` after
    a read that returned entries. Not thread-safe."""

    def __init__(self, client: RedisClient, scripts: Scripts, gkeys: GroupKeys) -> None:
        self.client, self.scripts, self.gkeys = client, scripts, gkeys
        pipe: Pipe[None] = Pipe(client)
        self._pipe = pipe if pipe.available else None
        self._exists = packed(("EXISTS", gkeys.ended))

    def read(self, instance: str, count: int, block: int | None) -> tuple[Any, bool]:
        """Up to ``count`` new entries of each stream (waiting up to ``block`` ms for the
        first; None: not at all) as an ``XREADGROUP`` reply, and whether the consumer's
        ``ended`` hash existed after the read.

        Raises:
            ConsumerNotFound: the group is missing on the log.
        """
        if self._pipe is None:
            reply = read_group(self.client, self.scripts, self.gkeys, instance, count, block)
            return reply, bool(reply) and bool(self.client.exists(self.gkeys.ended))
        gkeys = self.gkeys
        args: list[Any] = ["XREADGROUP", "GROUP", gkeys.group, instance, "COUNT", count]
        if block is not None:
            args += ["BLOCK", block]
        data = packed([*args, "STREAMS", gkeys.queue_keys.log, gkeys.direct, ">", ">"])
        data += self._exists
        for attempt in range(2):
            pipe = self._pipe
            pipe.write(data, ((None, None, b""), (None, None, b"")))
            try:
                reply, exists = pipe.read_replies()
            finally:
                pipe.release()
            if attempt == 0 and isinstance(reply, redis.ResponseError) and is_nogroup(reply):
                recover_group(self.client, self.scripts, gkeys)
                continue
            for got in (reply, exists):
                if isinstance(got, BaseException):
                    raise got
            if isinstance(reply, dict):  # RESP3's map, unparsed: {key: entries}
                reply = list(reply.items())
            return reply, bool(exists)
        raise AssertionError("unreachable")  # pragma: no cover
