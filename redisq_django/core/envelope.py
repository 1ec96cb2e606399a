"""The envelope: one message as it is stored in Redis (PROTOCOL.md, "Envelope v1").

Outgoing, a message is an :class:`Envelope` built once by ``Broker.prepare`` (validated
and encoded) and sent anywhere by ``Broker.send``: to the log, to the delayed set, at
most once. Incoming, :func:`decode` turns a stream entry's fields into its parts.

A stream entry is a flat map of fields; only ``payload`` is required, so
``XADD redisq:{q}:log * payload '{"a":1}'`` from any client is a valid message. Zset
members (delayed messages, retries) hold the same map as one JSON object of strings.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from redisq_django.core.clock import MAX_TIME_MS, datetime_to_ms, ms_from_entry_id, now_ms
from redisq_django.core.errors import InvalidKey, RedisqError
from redisq_django.core.frozen import Frozen
from redisq_django.core.ids import new_message_id
from redisq_django.core.json import loads
from redisq_django.core.wire import MAX_INT_DIGITS, to_str, wire_int

ENVELOPE_VERSION = 1

#: Message ids are at most this many characters (ours are 32 hex, entry ids at most 41):
#: dead-letter rows and outbox rows hold an id in a column of this size, under a unique
#: constraint, so a longer one is refused at publish and undecodable on the wire.
MAX_ID_LENGTH = 64

#: An ordering key is at most this many bytes, UTF-8 encoded (PROTOCOL.md, ``key``).
MAX_KEY_BYTES = 256

# Field names (bytes, as redis-py returns them).
F_VERSION = b"v"
F_PAYLOAD = b"payload"
F_HEADERS = b"headers"
F_ID = b"id"
F_PUBLISHED_AT = b"published_at"
F_ATTEMPTS = b"attempts"
F_FIRST_FAILED_AT = b"first_failed_at"
#: Of the deliveries in ``attempts``, those whose handler raised, for consumers that
#: count failures apart from crashes (Django tasks write it); absent = 0.
F_FAILURES = b"failures"
F_DUE_AT = b"due_at"
#: The ordering key: the entity a message is about (``"order-42"``); carried, shown.
F_KEY = b"key"
#: The one field of a delayed or retry member promoted as it was (not a valid envelope).
F_RAW_MEMBER = b"raw"
#: On a retry: the error of the failed delivery (``Class: message``), for operators.
F_LAST_ERROR = b"last_error"
#: :data:`F_LAST_ERROR` is cut to this many characters.
MAX_LAST_ERROR = 500

#: Fields that a retry or re-drive carries over from the entry it came from.
CARRIED_FIELDS = (F_VERSION, F_PAYLOAD, F_HEADERS, F_ID, F_PUBLISHED_AT, F_DUE_AT, F_KEY)

Delay = float | int | dt.timedelta | None


def check_key(key: object) -> str:
    """``key`` if it is a valid ordering key: a non-empty ``str`` of at most
    :data:`MAX_KEY_BYTES` bytes in UTF-8.

    Raises:
        InvalidKey: it is not; the message says what is wrong and the limit.
    """
    if not isinstance(key, str):
        raise InvalidKey(
            f"An ordering key must be a str naming what the message is about (e.g. "
            f"'order-42'), got {type(key).__name__}; pass key=None for no key."
        )
    if not key:
        raise InvalidKey("An ordering key must not be empty; pass key=None for no key.")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 for it
        raise InvalidKey(f"An ordering key must be valid Unicode text, got {key[:40]!r}.") from None
    if size > MAX_KEY_BYTES:
        raise InvalidKey(
            f"An ordering key is at most {MAX_KEY_BYTES} bytes in UTF-8, got {size} "
            f"({key[:40]!r}...): name the entity (its id), not its data."
        )
    return key


class Due(NamedTuple):
    """When a delayed message is due.

    Attributes:
        at_ms: the due time by the publisher's clock (ms).
        delay_ms: for ``delay=``, the delay itself (ms): Redis makes it a due time by
            its own clock when it receives the message, so a publisher's skewed clock
            never moves it. None for ``eta=``: an absolute time, compared with Redis's
            clock as it is.
    """

    at_ms: int
    delay_ms: int | None = None


def due_of(delay: Delay, eta: dt.datetime | None) -> Due | None:
    """When a message published now with ``delay`` or ``eta`` is due, or None when it
    is due at once (as :func:`due_at_ms`, plus the delay for Redis to convert)."""
    at = due_at_ms(delay, eta)
    if at is None:
        return None
    return Due(at, _delay_ms(delay) if delay is not None else None)


def _delay_ms(delay: float | int | dt.timedelta) -> int:
    """A delay in whole ms, rounded up (a message is never due early)."""
    seconds = delay.total_seconds() if isinstance(delay, dt.timedelta) else delay
    if seconds < 0:
        raise ValueError(f"delay must be >= 0 seconds, got {seconds}")
    return math.ceil(seconds * 1000)


def due_at_ms(delay: Delay, eta: dt.datetime | None, *, now: int | None = None) -> int | None:
    """The due time (ms) of a message published ``now`` with ``delay`` or ``eta``, or
    None when it is due at once. Rounded up: a message is never due early.

    An ``eta`` is always a due time, also one this host's clock says has passed: only
    Redis's clock decides what is due (``promote.lua``), and this host's may run ahead
    of it (one already passed is promoted within a poll interval).

    Raises:
        ValueError: both given, a negative delay, or a naive ``eta``.
    """
    if delay is not None and eta is not None:
        raise ValueError("Pass either delay= or eta=, not both.")
    now = now_ms() if now is None else now
    if delay is not None:
        ms = _delay_ms(delay)
        return now + ms if ms > 0 else None
    if eta is not None:
        if eta.tzinfo is None:
            raise ValueError(f"eta {eta!r} has no time zone; pass an aware datetime.")
        return datetime_to_ms(eta)
    return None


def content_fields(payload_json: bytes, headers_json: bytes | None) -> list[bytes]:
    """The entry fields of a message's content: its payload, and its headers if any (an
    immediate message without an id or ordering key of its own has no others)."""
    if headers_json:
        return [F_PAYLOAD, payload_json, F_HEADERS, headers_json]
    return [F_PAYLOAD, payload_json]


@dataclass(slots=True, kw_only=True)
class EnvelopeFields:
    """An envelope's fields, checked as they are set: what an :class:`Envelope` is while
    it is built (see :class:`~redisq_django.core.frozen.Frozen`)."""

    queue: str
    id: str | None
    payload_json: bytes
    headers_json: bytes | None = None
    published_at_ms: int | None = None
    due_at_ms: int | None = None
    delay_ms: int | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        delayed = self.due_at_ms is not None or self.delay_ms is not None
        if delayed and (self.id is None or self.published_at_ms is None):
            raise ValueError("A delayed envelope needs its own id and a publish time.")
        if self.id is not None and len(self.id) > MAX_ID_LENGTH:
            raise ValueError(f"A message id is at most {MAX_ID_LENGTH} characters.")


_new_fields = object.__new__


class Envelope(Frozen, EnvelopeFields):
    """One outgoing message, validated and encoded, ready to be sent (``Broker.send``).
    Frozen (``dataclasses.replace`` builds another).

    Attributes:
        queue: the queue it goes to.
        id: the message id; None lets the log entry id become the message id (immediate
            messages only; delayed ones and publish-once need an id of their own).
        payload_json: the payload as UTF-8 JSON.
        headers_json: the headers as a UTF-8 JSON object, or None.
        published_at_ms: publish time (ms); None means "the log entry id's time".
        due_at_ms: when set, the message is delayed until then (ms).
        delay_ms: when set (``delay=``), Redis sets the due time, this many ms after it
            receives the message, by its own clock; ``due_at_ms`` is then only the
            publisher's estimate (kept where a message waits before it is sent, as in
            an outbox row) and the stream fields leave ``due_at`` to Redis.
        key: the ordering key (checked by ``Broker.prepare``: :func:`check_key`), or None.
    """

    __slots__ = ()

    @classmethod
    def build(
        cls,
        queue: str,
        id: str | None,
        payload_json: bytes,
        headers_json: bytes | None,
        due: Due | None,
        key: str | None = None,
    ) -> Envelope:
        """An immediate envelope, or, with ``due``, a delayed one published now (with an id
        of its own: ``id`` or a new one)."""
        if due is None:
            return cls.immediate(queue, id, payload_json, headers_json, key)
        return cls(
            queue=queue,
            id=id or new_message_id(),
            payload_json=payload_json,
            headers_json=headers_json,
            published_at_ms=now_ms(),
            due_at_ms=due.at_ms,
            delay_ms=due.delay_ms,
            key=key,
        )

    @classmethod
    def immediate(
        cls,
        queue: str,
        id: str | None,
        payload_json: bytes,
        headers_json: bytes | None = None,
        key: str | None = None,
    ) -> Envelope:
        """An immediate envelope (no publish or due time), checked as the constructor
        checks it, in a fifth of its time: every publish and every replayed row builds
        one (bench/RESULTS.md, issue 37). ``key`` must be checked already
        (:func:`check_key`).

        Raises:
            ValueError: ``id`` is longer than :data:`MAX_ID_LENGTH`.
        """
        if id is not None and len(id) > MAX_ID_LENGTH:
            raise ValueError(f"A message id is at most {MAX_ID_LENGTH} characters.")
        # The fields' plain dataclass, filled slot by slot, then frozen as Frozen does.
        e = _new_fields(EnvelopeFields)
        e.queue, e.id, e.payload_json, e.headers_json = queue, id, payload_json, headers_json
        e.published_at_ms = e.due_at_ms = e.delay_ms = None
        e.key = key
        e.__class__ = cls
        return e  # type: ignore[return-value]

    def fields(self) -> list[bytes]:
        """The stream entry as a flat field/value list (for XADD)."""
        out = content_fields(self.payload_json, self.headers_json)
        if self.id is not None:
            out += [F_ID, self.id.encode()]
        if self.published_at_ms is not None:
            out += [F_PUBLISHED_AT, str(self.published_at_ms).encode()]
        if self.due_at_ms is not None and self.delay_ms is None:
            out += [F_DUE_AT, str(self.due_at_ms).encode()]
        if self.key is not None:
            out += [F_KEY, self.key.encode()]
        return out

    def member(self) -> bytes:
        """The delayed-set member: the same fields as one JSON object of strings, ``id``
        first (members of one due time are promoted in their bytes' order:
        :func:`new_message_id`)."""
        flat = self.fields()
        member = {flat[i].decode(): flat[i + 1].decode("utf-8") for i in range(0, len(flat), 2)}
        if "id" in member:
            member = {"id": member.pop("id"), **member}
        return json.dumps(member, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def with_id(self) -> Envelope:
        """This envelope with an id of its own (a new one when it had none)."""
        if self.id is not None:
            return self
        return Envelope(
            queue=self.queue,
            id=new_message_id(),
            payload_json=self.payload_json,
            headers_json=self.headers_json,
            published_at_ms=self.published_at_ms,
            due_at_ms=self.due_at_ms,
            delay_ms=self.delay_ms,
            key=self.key,
        )


class UndecodableEntry(RedisqError, ValueError):
    """A Redis entry is not a valid envelope; ``reason`` says why."""


class Decoded(NamedTuple):
    """The parts of a valid envelope."""

    id: str
    payload: Any
    headers: dict[str, Any]
    attempts: int
    published_at_ms: int
    first_failed_at_ms: int | None
    due_at_ms: int | None
    failures: int = 0
    key: str | None = None


def _int_field(fields: Mapping[bytes, bytes], name: bytes, *, time: bool = False) -> int | None:
    raw = fields.get(name)
    if raw is None:
        return None
    value = wire_int(raw)
    if value is None:
        raise UndecodableEntry(
            f"field {name.decode()!r} is not an integer (1 to {MAX_INT_DIGITS} digits 0-9)"
        )
    if time and value > MAX_TIME_MS:
        # A time no datetime can hold would fail later, where it is shown or stored.
        raise UndecodableEntry(f"field {name.decode()!r} is not a time before the year 10000")
    return value


def decode(entry_id: bytes, fields: Mapping[bytes, bytes]) -> Decoded:
    """Validate an envelope and return its parts.

    Raises:
        UndecodableEntry: the entry is not a valid envelope; the message says why.
    """
    raw_payload = fields.get(F_PAYLOAD)
    if raw_payload is None:
        if fields.keys() == {F_RAW_MEMBER}:  # as promote.lua moves such a member
            raise UndecodableEntry("a delayed or retry member that is not a JSON object of strings")
        raise UndecodableEntry("no 'payload' field")
    try:
        payload = loads(raw_payload)
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise UndecodableEntry(f"payload is not valid JSON: {exc}") from None
    if len(fields) == 1:
        # The common case (a plain publish): the id and time come from the entry id.
        return Decoded(entry_id.decode(), payload, {}, 0, ms_from_entry_id(entry_id), None, None)
    version = fields.get(F_VERSION, b"1")
    if version != b"1":
        raise UndecodableEntry(f"unsupported envelope version {to_str(version[:20])!r}")
    headers: dict[str, Any] = {}
    raw_headers = fields.get(F_HEADERS)
    if raw_headers is not None:
        try:
            headers = loads(raw_headers)
        except (ValueError, RecursionError) as exc:
            raise UndecodableEntry(f"headers are not valid JSON: {exc}") from None
        if not isinstance(headers, dict):
            raise UndecodableEntry("headers are not a JSON object")
    raw_id = fields.get(F_ID)
    try:
        message_id = (raw_id if raw_id is not None else entry_id).decode("utf-8")
    except UnicodeDecodeError:
        raise UndecodableEntry("field 'id' is not UTF-8") from None
    if len(message_id) > MAX_ID_LENGTH:
        raise UndecodableEntry(f"field 'id' is longer than {MAX_ID_LENGTH} characters")
    published = _int_field(fields, F_PUBLISHED_AT, time=True)
    raw_key = fields.get(F_KEY)
    return Decoded(
        message_id,
        payload,
        headers,
        _int_field(fields, F_ATTEMPTS) or 0,
        published if published is not None else ms_from_entry_id(entry_id),
        _int_field(fields, F_FIRST_FAILED_AT, time=True),
        _int_field(fields, F_DUE_AT, time=True),
        _int_field(fields, F_FAILURES) or 0,
        None if raw_key is None else _key_field(raw_key),
    )


def _key_field(raw: bytes) -> str:
    """An entry's ``key`` field, as ``Broker.prepare`` allows it (:func:`check_key`)."""
    if not raw:
        raise UndecodableEntry("field 'key' is empty")
    if len(raw) > MAX_KEY_BYTES:
        raise UndecodableEntry(f"field 'key' is longer than {MAX_KEY_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UndecodableEntry("field 'key' is not UTF-8") from None


#: The lone surrogates ``surrogateescape`` decodes the bytes of invalid UTF-8 to.
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def describe_raw(fields: Mapping[bytes, bytes]) -> bytes:
    """Every field of an entry as one JSON object of strings (kept with an undecodable
    dead letter as ``raw``), byte for byte: a byte that is not part of valid UTF-8 is
    written as the JSON escape ``\\udcNN`` (a lone surrogate, as Python's
    ``surrogateescape`` decodes it; no UTF-8 text decodes to one), so
    ``json.loads(raw)`` and ``.encode("utf-8", "surrogateescape")`` give every byte back."""
    readable = {
        k.decode("utf-8", "surrogateescape"): v.decode("utf-8", "surrogateescape")
        for k, v in fields.items()
    }
    text = json.dumps(readable, ensure_ascii=False)
    return _ESCAPED_BYTE.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")


def next_delivery_fields(
    fields: Mapping[bytes, bytes],
    *,
    message_id: str,
    published_at_ms: int,
    attempts: int,
    first_failed_at_ms: int | None,
) -> dict[bytes, bytes]:
    """The envelope of a message's next delivery (a retry, or a hand-back): its fields
    with the message id and publish time pinned, ``attempts`` deliveries counted so far
    and the first failure time (when there was one)."""
    out = {k: v for k, v in fields.items() if k not in (F_ATTEMPTS, F_FIRST_FAILED_AT)}
    out[F_ID] = message_id.encode()
    out[F_PUBLISHED_AT] = str(published_at_ms).encode()
    out[F_ATTEMPTS] = str(attempts).encode()
    if first_failed_at_ms is not None:
        out[F_FIRST_FAILED_AT] = str(first_failed_at_ms).encode()
    return out
