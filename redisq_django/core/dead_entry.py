"""Failures and dead letters: why a message died, and the record it leaves in Redis."""

from __future__ import annotations

import datetime as dt
import json
import traceback as tb
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from redisq_django.core import envelope as env
from redisq_django.core.clock import MAX_TIME_MS, ms_to_datetime

# What tells causes apart has its own module; its names stay importable from here.
from redisq_django.core.error_key import ERROR_KEY_LENGTH as ERROR_KEY_LENGTH
from redisq_django.core.error_key import normalise_error as normalise_error
from redisq_django.core.errors import NotRedrivable
from redisq_django.core.wire import wire_int

#: Tracebacks and error messages stored with a dead letter are cut to this many characters.
MAX_ERROR_TEXT = 32_000

# Dead-letter fields (beside the envelope fields).
F_REASON = b"reason"
F_ERROR_CLASS = b"error_class"
F_ERROR_MESSAGE = b"error_message"
F_TRACEBACK = b"traceback"
F_LAST_FAILED_AT = b"last_failed_at"
F_GROUP = b"group"
F_RAW = b"raw"


class DeadReason(StrEnum):
    """Why a message became a dead letter."""

    FAILED = "failed"  # the handler raised on every allowed attempt
    REJECTED = "rejected"  # the handler asked for it (Reject)
    UNDECODABLE = "undecodable"  # the entry is not a valid envelope
    LEASE_EXPIRED = "lease_expired"  # instances kept crashing on it
    ENDED = "ended"  # an operator ended it before its time (end_message.lua)


@dataclass(frozen=True, slots=True)
class Failure:
    """What went wrong in one delivery: error class, message and traceback.

    Texts are cut to :data:`MAX_ERROR_TEXT` characters when stored.
    """

    error_class: str
    message: str = ""
    traceback: str = ""

    @classmethod
    def from_exception(cls, exc: BaseException) -> Failure:
        """The failure an exception describes (with its formatted traceback)."""
        return cls(
            type(exc).__qualname__,
            str(exc),
            "".join(tb.format_exception(type(exc), exc, exc.__traceback__)),
        )

    @classmethod
    def ended(cls, by: str, last_error: str = "") -> Failure:
        """The failure of a message an operator ended (reason ``ended``): who, and the
        error of its last attempt when it had one."""
        text = f"ended by {by or 'an operator'} before its time"
        return cls("Ended", f"{text}; its last error: {last_error}" if last_error else text)

    @classmethod
    def lease_expired(cls, attempts: int, failures: int = 0) -> Failure:
        """The failure of a ``lease_expired`` dead letter delivered ``attempts`` times,
        of which ``failures`` failed (settled) and the rest were lost (PROTOCOL.md)."""
        text = f"delivered {attempts} times without being acknowledged: the handler crashed "
        if not failures:
            return cls("LeaseExpired", text + "or outran the visibility timeout each time")
        return cls(
            "LeaseExpired",
            text + f"or outran the visibility timeout {attempts - failures} times (and "
            f"failed {failures} times)",
        )

    @classmethod
    def of(cls, failure: Failure | BaseException) -> Failure:
        """``failure`` itself, or the failure an exception describes."""
        return failure if isinstance(failure, Failure) else cls.from_exception(failure)


def dead_fields(
    base: Mapping[bytes, bytes],
    *,
    consumer: str,
    reason: DeadReason,
    failure: Failure,
    failed_at_ms: int,
) -> dict[bytes, bytes]:
    """``base`` (an envelope's fields) plus the dead-letter fields."""
    fields = dict(base)
    fields[F_REASON] = reason.value.encode()
    fields[F_ERROR_CLASS] = (failure.error_class or "Error").encode("utf-8", "backslashreplace")
    fields[F_ERROR_MESSAGE] = failure.message[:MAX_ERROR_TEXT].encode("utf-8", "backslashreplace")
    fields[F_TRACEBACK] = failure.traceback[-MAX_ERROR_TEXT:].encode("utf-8", "backslashreplace")
    fields[F_LAST_FAILED_AT] = str(failed_at_ms).encode()
    fields[F_GROUP] = consumer.encode()  # the wire field keeps its name
    fields.setdefault(env.F_FIRST_FAILED_AT, str(failed_at_ms).encode())
    return fields


def undecodable_fields(
    entry_id: bytes, raw: Mapping[bytes, bytes], *, consumer: str, reason: str, now: int
) -> dict[bytes, bytes]:
    """A dead letter for an entry that is not a valid envelope, keeping what it held."""
    base = {env.F_ID: entry_id, F_RAW: env.describe_raw(raw), env.F_ATTEMPTS: b"1"}
    if isinstance(raw.get(env.F_PAYLOAD), bytes):
        base[env.F_PAYLOAD] = raw[env.F_PAYLOAD]
    return dead_fields(
        base,
        consumer=consumer,
        reason=DeadReason.UNDECODABLE,
        failure=Failure("UndecodableEntry", reason),
        failed_at_ms=now,
    )


def redrive_fields(fields: Mapping[bytes, bytes]) -> dict[bytes, bytes]:
    """A fresh delivery (attempt count reset) of a dead letter's envelope.

    Raises:
        NotRedrivable: an undecodable dead letter (it would only die again), or fields
            without a payload.
    """
    if fields.get(F_REASON) == DeadReason.UNDECODABLE.encode():
        raise NotRedrivable(
            "An undecodable dead letter cannot be delivered again: its entry is not a valid "
            "envelope (see its error message and raw fields). Publish a corrected message "
            "and discard this one."
        )
    if env.F_PAYLOAD not in fields:
        raise NotRedrivable("A dead letter to re-drive needs a 'payload' field.")
    return {k: v for k, v in fields.items() if k in env.CARRIED_FIELDS}


@dataclass(frozen=True)
class DeadEntry:
    """A dead letter as stored in Redis (``redisq:{q}:g:<g>:dead``); its database row, once
    sunk, is ``redisq_django.models.DeadLetter``.

    Attributes:
        entry_id: its id in the dead stream.
        queue, consumer: where it died (the queue and the logical consumer).
        id: the message id.
        payload: the decoded payload, or the raw text when it is not valid JSON.
        headers: the decoded headers.
        attempts: deliveries made.
        reason: why it died (a :class:`DeadReason` value).
        error_class, error_message, traceback: the last failure.
        published_at, first_failed_at, last_failed_at: UTC datetimes.
        fields: the raw fields (to re-drive the exact envelope); ``key`` gives the
            ordering key among them.
        partition: the partition of a partitioned queue whose dead stream holds it
            (``{q#i}``), None on an unpartitioned queue; entry ids repeat across
            partitions, so it names the entry together with ``entry_id``.
    """

    entry_id: str
    queue: str
    consumer: str
    id: str
    payload: Any
    headers: dict[str, Any]
    attempts: int
    reason: str
    error_class: str
    error_message: str
    traceback: str
    published_at: dt.datetime | None
    first_failed_at: dt.datetime | None
    last_failed_at: dt.datetime | None
    fields: dict[bytes, bytes]
    partition: int | None = None

    @classmethod
    def from_entry(
        cls,
        queue: str,
        entry_id: bytes,
        fields: dict[bytes, bytes],
        partition: int | None = None,
    ) -> DeadEntry:
        """Read a dead-stream entry (never raises on odd content: it is kept as text) of
        ``queue``, or of its partition ``partition``."""

        def text(name: bytes) -> str:
            return fields.get(name, b"").decode("utf-8", "backslashreplace")

        def when(name: bytes) -> dt.datetime | None:
            ms = wire_int(fields.get(name, b""))
            if ms is None or ms > MAX_TIME_MS:
                return None  # absent, or no time a datetime can hold: left empty
            return ms_to_datetime(ms)

        raw_payload = fields.get(env.F_PAYLOAD, b"")
        try:
            payload: Any = json.loads(raw_payload)
        except (ValueError, RecursionError):  # kept as text, as an undecodable entry's
            payload = raw_payload.decode("utf-8", "backslashreplace")
        try:
            headers = json.loads(fields.get(env.F_HEADERS, b"{}"))
            headers = headers if isinstance(headers, dict) else {}
        except (ValueError, RecursionError):
            headers = {}
        return cls(
            entry_id=entry_id.decode("utf-8", "backslashreplace"),
            queue=queue,
            consumer=text(F_GROUP),
            id=text(env.F_ID) or entry_id.decode("utf-8", "backslashreplace"),
            payload=payload,
            headers=headers,
            attempts=min(wire_int(fields.get(env.F_ATTEMPTS, b"0")) or 0, 2**31 - 1),
            reason=text(F_REASON),
            error_class=text(F_ERROR_CLASS),
            error_message=text(F_ERROR_MESSAGE),
            traceback=text(F_TRACEBACK),
            published_at=when(env.F_PUBLISHED_AT),
            first_failed_at=when(env.F_FIRST_FAILED_AT),
            last_failed_at=when(F_LAST_FAILED_AT),
            fields=dict(fields),
            partition=partition,
        )

    @property
    def key(self) -> str | None:
        """The message's ordering key, or None (as text, whatever bytes it held)."""
        raw = self.fields.get(env.F_KEY)
        return None if raw is None else raw.decode("utf-8", "backslashreplace")

    @property
    def group(self) -> str:
        """Deprecated (gone in the next minor version): the logical consumer, :attr:`consumer`."""
        warnings.warn(
            "the .group of a dead letter read from Redis is deprecated, use .consumer",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.consumer
