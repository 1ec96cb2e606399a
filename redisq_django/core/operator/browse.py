"""Every message before it dies, page by page: what waits for a logical consumer, what is
delayed, retrying or in flight, and the queue's log, each page read in one or two
pipelined round trips however long the list.

Pages are cut by entry ids and scores, never by an offset into the whole list: the
cursor of the next page is the last id shown (streams) or the last score shown and how
many entries of that score were shown (sorted sets; an offset only within one score),
so a page deep in 100,000 entries costs what the first one does.

A :class:`Entry` keeps the raw fields of the message; :attr:`Entry.ref` finds it again
(:func:`find`) for a detail view or an action.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, cast

from redisq_django.core import envelope as env
from redisq_django.core.clock import ms_from_entry_id
from redisq_django.core.dead_entry import F_ERROR_CLASS, F_ERROR_MESSAGE
from redisq_django.core.keys import GroupKeys, QueueKeys
from redisq_django.core.members import (
    PREVIEW_BYTES,
    S_DELAYED,
    S_DIRECT,
    S_LOG,
    S_RETRY,
    member_fields,
    peek_member,
)
from redisq_django.core.types import RedisClient, ScoredMembers
from redisq_django.core.wire import json_object, to_str, wire_int

#: Entries per page: the default and the most a caller may ask for.
PAGE_SIZE = 25
MAX_PAGE = 200
#: Characters of a payload shown in a list.
PREVIEW_CHARS = 140
#: A delayed or retry member larger than this is not JSON-decoded whole for a list:
#: its fields are found by :func:`~redisq_django.core.members.peek_member`, its
#: payload kept only in part.
PEEK_MEMBER_BYTES = 64 * 1024

# The kinds of lists and of entries.
WAITING, DELAYED, RETRYING, IN_FLIGHT, LOG = "waiting", "delayed", "retrying", "in_flight", "log"

_SPACES = re.compile(r"\s+")
_SCORE_CURSOR = re.compile(r"^(-?[0-9]+(?:\.[0-9]+)?):([0-9]+)\Z")
_ID = re.compile(r"^[0-9]+-[0-9]+\Z")


@dataclass(frozen=True)
class Entry:
    """One message as a list shows it.

    Attributes:
        where: ``log``, ``direct`` (the consumer's private input), ``delayed`` or ``retry``.
        key: the stream entry id, or the score (due time, ms) in a sorted set.
        fields: its envelope's fields as stored (a member that is not a JSON object of
            strings: one field ``raw``).
        owner, idle_ms, deliveries: in flight only: the instance holding it, ms since it
            was delivered (or its lease renewed), deliveries so far.
        since_ms: in flight only: when its handler started, when its instance reports
            running it (else None).
        member: for sorted sets, the member itself (what an action removes).
        cut: its payload was kept only in part (a list's preview of a large member:
            :func:`member_fields` with ``peek``); :func:`find` reads it whole.
        part: the partition it is in, on a partitioned queue (None: the queue has one).
    """

    where: str
    key: str
    fields: dict[bytes, bytes]
    owner: str = ""
    idle_ms: int | None = None
    deliveries: int | None = None
    since_ms: int | None = None
    member: bytes = field(default=b"", repr=False)
    cut: bool = False
    part: int | None = None

    @property
    def message_id(self) -> str:
        raw = self.fields.get(env.F_ID)
        return to_str(raw) if raw is not None else self.key

    @property
    def ordering_key(self) -> str | None:
        """The message's ordering key (its ``key`` field; ``key`` here is where the entry
        is), or None."""
        raw = self.fields.get(env.F_KEY)
        return None if raw is None else raw.decode("utf-8", "replace")

    @property
    def ref(self) -> str:
        """How :func:`find` finds it again: ``log:<id>``, ``direct:<id>``,
        ``delayed:<score>:<message id>`` or ``retry:<score>:<message id>``; on a
        partitioned queue followed by ``@<partition>`` (``partition_pages.part_ref``)."""
        if self.where in (S_DELAYED, S_RETRY):
            ref = f"{self.where}:{self.key}:{self.message_id}"
        else:
            ref = f"{self.where}:{self.key}"
        return ref if self.part is None else f"{ref}@{self.part}"

    @property
    def due_ms(self) -> int | None:
        """Delayed: when it is due; retrying: when its next attempt is due."""
        return int(float(self.key)) if self.where in (S_DELAYED, S_RETRY) else None

    @property
    def published_at_ms(self) -> int | None:
        raw = self.fields.get(env.F_PUBLISHED_AT)
        if raw is not None and (ms := wire_int(raw)) is not None:
            return ms
        return ms_from_entry_id(self.key) if _ID.match(self.key) else None

    @property
    def attempts(self) -> int:
        """Deliveries made before this entry was written (retries: failed attempts)."""
        return wire_int(self.fields.get(env.F_ATTEMPTS, b"0")) or 0

    @property
    def last_error(self) -> str:
        raw = self.fields.get(env.F_LAST_ERROR)
        if raw is None and F_ERROR_CLASS in self.fields:  # a dead letter's
            raw = self.fields[F_ERROR_CLASS] + b": " + self.fields.get(F_ERROR_MESSAGE, b"")
        return to_str(raw) if raw is not None else ""

    @property
    def payload_text(self) -> str:
        """The payload as stored (or the raw member of an undecodable entry)."""
        raw = self.fields.get(env.F_PAYLOAD, self.fields.get(env.F_RAW_MEMBER, b""))
        return raw.decode("utf-8", "replace")

    @property
    def preview(self) -> str:
        """The payload on one line, cut to :data:`PREVIEW_CHARS` characters: only its first
        :data:`PREVIEW_BYTES` bytes are decoded, however large it is."""
        raw = self.fields.get(env.F_PAYLOAD, self.fields.get(env.F_RAW_MEMBER, b""))
        cut = len(raw) > PREVIEW_BYTES or self.cut
        head = raw[:PREVIEW_BYTES].decode("utf-8", "ignore" if cut else "replace")
        text = _SPACES.sub(" ", head).strip()
        if len(text) <= PREVIEW_CHARS and not cut:
            return text
        return text[: PREVIEW_CHARS - 1] + "…"

    @property
    def unreadable(self) -> bool:
        """A delayed or retry member that is no JSON object of strings (another client
        wrote it): shown raw, marked unreadable."""
        return env.F_RAW_MEMBER in self.fields and len(self.fields) == 1

    @property
    def headers_text(self) -> str:
        return self.fields.get(env.F_HEADERS, b"").decode("utf-8", "replace")


@dataclass(frozen=True)
class Page:
    """Entries of one page, and the cursor of the next (None: this is the last)."""

    entries: list[Entry]
    next: str | None = None


def page_size(n: int | None) -> int:
    """``n`` within 1 … :data:`MAX_PAGE` (None: :data:`PAGE_SIZE`)."""
    return PAGE_SIZE if n is None else max(1, min(MAX_PAGE, n))


# -- waiting: the consumer's private input, then the log after its position -------------


def waiting(
    client: RedisClient, gkeys: GroupKeys, cursor: str | None, n: int | None = None
) -> Page:
    """What logical consumer ``gkeys`` receives next: first its private input (due
    retries, re-drives, messages delivered now), then the log after its position.

    ``cursor``: ``d:<id>`` or ``l:<id>`` from the last page (None: the first page). A
    log page costs one round trip, a page that starts in the private input two.
    """
    n = page_size(n)
    log = gkeys.queue_keys.log
    where, _, after = (cursor or "").partition(":")
    if where == "l" and _ID.match(after):
        reply = client.xrange(log, f"({after}", "+", count=n + 1)
        return _stream_page(S_LOG, "l", reply, n)
    with client.pipeline(transaction=False) as pipe:
        pipe.xinfo_groups(log)
        pipe.xinfo_groups(gkeys.direct)
        groups_log, groups_direct = pipe.execute(raise_on_error=False)
    last_log = _last_delivered(groups_log, gkeys.group)
    start = (
        after if where == "d" and _ID.match(after) else _last_delivered(groups_direct, gkeys.group)
    )
    with client.pipeline(transaction=False) as pipe:
        pipe.xrange(gkeys.direct, f"({start}" if start else "-", "+", count=n + 1)
        pipe.xrange(log, f"({last_log}" if last_log else "-", "+", count=n + 1)
        direct, rest = pipe.execute(raise_on_error=False)
    direct = direct if isinstance(direct, list) else []
    rest = rest if isinstance(rest, list) and last_log is not None else []
    entries = [_entry(S_DIRECT, eid, f) for eid, f in direct[:n]]
    if len(direct) > n:
        return Page(entries, f"d:{entries[-1].key}")
    if len(entries) == n:  # a page of the private input only; the log follows
        return Page(entries, f"l:{last_log}" if rest else None)
    page = _stream_page(S_LOG, "l", rest, n - len(entries))
    return Page(entries + page.entries, page.next)


def _last_delivered(groups: Any, group: str) -> str | None:
    """The group's last-delivered id from an ``XINFO GROUPS`` reply (None: no group)."""
    if not isinstance(groups, list):
        return None
    for info in groups:
        if to_str(info.get("name")) == group:
            return to_str(info.get("last-delivered-id"))
    return None


def _stream_page(where: str, prefix: str, reply: Any, n: int) -> Page:
    entries = [_entry(where, eid, f) for eid, f in (reply or [])[:n]] if n > 0 else []
    more = isinstance(reply, list) and len(reply) > n
    return Page(entries, f"{prefix}:{entries[-1].key}" if more and entries else None)


def _entry(where: str, entry_id: Any, fields: Any, **extra: Any) -> Entry:
    return Entry(where, to_str(entry_id), dict(fields or {}), **extra)


# -- the queue's log, newest first ------------------------------------------------------


def log(client: RedisClient, keys: QueueKeys, cursor: str | None, n: int | None = None) -> Page:
    """The queue's log, newest first (acknowledged history included), one round trip.

    ``cursor``: ``l:<id>``, the oldest id of the last page (None: the newest page).
    """
    n = page_size(n)
    _, _, before = (cursor or "").partition(":")
    top = f"({before}" if _ID.match(before) else "+"
    reply = client.xrevrange(keys.log, top, "-", count=n + 1)
    return _stream_page(S_LOG, "l", reply, n)


# -- sorted sets: delayed messages, retries ---------------------------------------------


def delayed(client: RedisClient, keys: QueueKeys, cursor: str | None, n: int | None = None) -> Page:
    """The queue's delayed messages, the soonest due first, one round trip."""
    return _scored(client, keys.delayed, S_DELAYED, cursor, n)


def retrying(
    client: RedisClient, gkeys: GroupKeys, cursor: str | None, n: int | None = None
) -> Page:
    """The consumer's failed messages waiting for their next attempt, soonest first."""
    return _scored(client, gkeys.retry, S_RETRY, cursor, n)


def _scored(client: RedisClient, key: str, where: str, cursor: str | None, n: int | None) -> Page:
    """A page of a sorted set by score. ``cursor``: ``<score>:<k>``, the last score shown
    and how many members of that score were shown (skipped within that score only)."""
    n = page_size(n)
    match = _SCORE_CURSOR.match(cursor or "")
    low, skip = (match.group(1), int(match.group(2))) if match else ("-inf", 0)
    reply: ScoredMembers = cast(
        "ScoredMembers",
        client.zrangebyscore(key, low, "+inf", start=skip, num=n + 1, withscores=True),
    )
    rows = [(member, _score(score)) for member, score in reply]
    entries = [_listed(where, score, member) for member, score in rows[:n]]
    if len(rows) <= n or not entries:
        return Page(entries)
    last = entries[-1].key
    same = sum(1 for e in entries if e.key == last)
    return Page(entries, f"{last}:{same + (skip if last == low else 0)}")


def _listed(where: str, score: str, member: bytes) -> Entry:
    """A member as a list shows it: a large one not JSON-decoded whole (its payload cut)."""
    if len(member) > PEEK_MEMBER_BYTES and not member.startswith(b"\xef\xbb\xbf"):
        peeked = peek_member(member)
        if peeked is not None:
            return Entry(where, score, peeked, member=member, cut=True)
    return Entry(where, score, member_fields(member), member=member)


def _score(score: float) -> str:
    return str(int(score)) if float(score).is_integer() else repr(float(score))


# -- in flight --------------------------------------------------------------------------


def in_flight(
    client: RedisClient, gkeys: GroupKeys, cursor: str | None, n: int | None = None
) -> Page:
    """Deliveries not yet acknowledged, from the log then from the private input, with
    their instance, idle time and delivery count: two round trips (``XPENDING``, then
    the entries and what their instances report)."""
    n = page_size(n)
    log_key, group = gkeys.queue_keys.log, gkeys.group
    where, _, after = (cursor or "").partition(":")
    after = after if _ID.match(after) else ""
    with client.pipeline(transaction=False) as pipe:
        if where != "d":
            pipe.xpending_range(log_key, group, f"({after}" if after else "-", "+", n + 1)
        start = f"({after}" if where == "d" and after else "-"
        pipe.xpending_range(gkeys.direct, group, start, "+", n + 1)
        replies = pipe.execute(raise_on_error=False)
    rows = [(S_LOG, r) for r in _rows(replies[0])] if where != "d" else []
    rows += [(S_DIRECT, r) for r in _rows(replies[-1])]
    shown, more = rows[:n], len(rows) > n
    with client.pipeline(transaction=False) as pipe:
        for stream, row in shown:
            eid = row["message_id"]
            pipe.xrange(log_key if stream == S_LOG else gkeys.direct, eid, eid)
        pipe.hgetall(gkeys.running)
        owners = sorted({to_str(row["consumer"]) for _, row in shown})
        for owner in owners:
            pipe.get(gkeys.instance(owner))
        got = pipe.execute(raise_on_error=False)
    reports = {o: json_object(r) for o, r in zip(owners, got[len(shown) + 1 :], strict=True)}
    entries = []
    for (stream, row), found in zip(shown, got, strict=False):
        eid, owner = to_str(row["message_id"]), to_str(row["consumer"])
        report = reports.get(owner, {})
        running = report.get("running") == f"{stream}:{eid}"
        fields = dict(found[0][1]) if isinstance(found, list) and found else {}
        entries.append(
            Entry(
                stream,
                eid,
                fields,
                owner=owner,
                idle_ms=int(row["time_since_delivered"]),
                deliveries=int(row["times_delivered"]),
                since_ms=report.get("since") if running else None,
            )
        )
    nxt = f"{'l' if entries[-1].where == S_LOG else 'd'}:{entries[-1].key}" if more else None
    return Page(entries, nxt)


def _rows(reply: Any) -> list[dict[str, Any]]:
    return reply if isinstance(reply, list) else []


# -- one entry --------------------------------------------------------------------------


def find(client: RedisClient, keys: QueueKeys, consumer: str | None, ref: str) -> Entry | None:
    """The entry ``ref`` (see :attr:`Entry.ref`) names, or None when it is gone (handled,
    promoted, delivered meanwhile). Retry and direct refs need the logical ``consumer``.

    Raises:
        ValueError: ``ref`` is not a ref, or needs a ``consumer``.
    """
    where, _, rest = ref.partition(":")
    if where in (S_LOG, S_DIRECT) and _ID.match(rest):
        stream = keys.log if where == S_LOG else _group(keys, consumer).direct
        found = client.xrange(stream, rest, rest)
        return _entry(where, found[0][0], found[0][1]) if found else None
    score, _, message_id = rest.partition(":")
    if where in (S_DELAYED, S_RETRY) and _SCORE_CURSOR.match(f"{score}:0") and message_id:
        zset = keys.delayed if where == S_DELAYED else _group(keys, consumer).retry
        scored = cast("ScoredMembers", client.zrangebyscore(zset, score, score, withscores=True))
        for member, value in scored:
            entry = Entry(where, _score(value), member_fields(member), member=member)
            if entry.message_id == message_id:
                return entry
        return None
    raise ValueError(f"Not a message reference: {ref!r}")


def _group(keys: QueueKeys, consumer: str | None) -> GroupKeys:
    if not consumer:
        raise ValueError("A retry or direct entry belongs to a consumer: name it.")
    return keys.group(consumer)
