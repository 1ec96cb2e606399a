"""Building the envelopes of retries, dead letters and re-drives from a delivery."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from redisq_django.core import codec
from redisq_django.core._util import to_str
from redisq_django.core.message import Message

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

#: Why a message became a dead letter.
REASON_FAILED = "failed"  # the handler raised on every allowed attempt
REASON_REJECTED = "rejected"  # the handler asked for it (Reject)
REASON_UNDECODABLE = "undecodable"  # the entry is not a valid envelope
REASON_LEASE_EXPIRED = "lease_expired"  # instances kept crashing on it


def retry_fields(message: Message, failed_at_ms: int, *, failed: bool = True) -> dict[bytes, bytes]:
    """The envelope of the next delivery of ``message``: its fields with the attempt
    count so far and the first failure time, the message id and publish time pinned.

    With ``failed=False`` (a message handed back unstarted) this delivery is not counted.
    """
    fields = {
        k: v
        for k, v in message.fields.items()
        if k not in (codec.F_ATTEMPTS, codec.F_FIRST_FAILED_AT)
    }
    fields[codec.F_ID] = message.id.encode()
    fields[codec.F_PUBLISHED_AT] = str(message.published_at_ms).encode()
    fields[codec.F_ATTEMPTS] = str(message.attempts - (0 if failed else 1)).encode()
    first = message.first_failed_at_ms
    if first is not None:
        fields[codec.F_FIRST_FAILED_AT] = str(first).encode()
    elif failed:
        fields[codec.F_FIRST_FAILED_AT] = str(failed_at_ms).encode()
    return fields


def dead_fields(
    base: dict[bytes, bytes],
    *,
    group: str,
    reason: str,
    error_class: str,
    error_message: str,
    traceback: str,
    failed_at_ms: int,
) -> dict[bytes, bytes]:
    """``base`` plus the dead-letter fields."""
    fields = dict(base)
    fields[F_REASON] = reason.encode()
    fields[F_ERROR_CLASS] = error_class.encode("utf-8", "backslashreplace")
    fields[F_ERROR_MESSAGE] = error_message[:MAX_ERROR_TEXT].encode("utf-8", "backslashreplace")
    fields[F_TRACEBACK] = traceback[-MAX_ERROR_TEXT:].encode("utf-8", "backslashreplace")
    fields[F_LAST_FAILED_AT] = str(failed_at_ms).encode()
    fields[F_GROUP] = group.encode()
    fields.setdefault(codec.F_FIRST_FAILED_AT, str(failed_at_ms).encode())
    return fields


def undecodable_fields(
    entry_id: bytes, raw: Mapping[bytes, bytes], *, group: str, reason: str, now: int
) -> dict[bytes, bytes]:
    """A dead letter for an entry that is not a valid envelope, keeping what it held."""
    base = {codec.F_ID: entry_id, F_RAW: codec.describe_raw(raw), codec.F_ATTEMPTS: b"1"}
    if isinstance(raw.get(codec.F_PAYLOAD), bytes):
        base[codec.F_PAYLOAD] = raw[codec.F_PAYLOAD]
    return dead_fields(
        base,
        group=group,
        reason=REASON_UNDECODABLE,
        error_class="UndecodableEntry",
        error_message=reason,
        traceback="",
        failed_at_ms=now,
    )


def redrive_fields(fields: Mapping[bytes, bytes]) -> dict[bytes, bytes]:
    """A fresh delivery (attempt count reset) of a dead letter's envelope."""
    keep = (*codec.CARRIED_FIELDS,)
    return {k: v for k, v in fields.items() if k in keep}


@dataclass(frozen=True)
class DeadLetter:
    """A dead letter as stored in Redis (``redisq:{q}:g:<g>:dead``).

    Attributes:
        entry_id: its id in the dead stream.
        queue, group: where it died.
        id: the message id.
        payload: the decoded payload, or the raw text when it is not valid JSON.
        headers: the decoded headers.
        attempts: deliveries made.
        reason: ``failed``, ``rejected``, ``undecodable`` or ``lease_expired``.
        error_class, error_message, traceback: the last failure.
        published_at, first_failed_at, last_failed_at: UTC datetimes.
        fields: the raw fields (to re-drive the exact envelope).
    """

    entry_id: str
    queue: str
    group: str
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

    @classmethod
    def from_entry(cls, queue: str, entry_id: bytes, fields: dict[bytes, bytes]) -> DeadLetter:
        import json

        def text(name: bytes) -> str:
            return to_str(fields.get(name, b""))

        def when(name: bytes) -> dt.datetime | None:
            raw = fields.get(name)
            return codec.ms_to_datetime(int(raw)) if raw and raw.isdigit() else None

        raw_payload = fields.get(codec.F_PAYLOAD, b"")
        try:
            payload: Any = json.loads(raw_payload)
        except (ValueError, RecursionError):  # kept as text, as an undecodable entry's
            payload = to_str(raw_payload)
        try:
            headers = json.loads(fields.get(codec.F_HEADERS, b"{}"))
            headers = headers if isinstance(headers, dict) else {}
        except (ValueError, RecursionError):
            headers = {}
        attempts = fields.get(codec.F_ATTEMPTS, b"0")
        return cls(
            entry_id=to_str(entry_id),
            queue=queue,
            group=text(F_GROUP),
            id=text(codec.F_ID) or to_str(entry_id),
            payload=payload,
            headers=headers,
            attempts=int(attempts) if attempts.isdigit() else 0,
            reason=text(F_REASON),
            error_class=text(F_ERROR_CLASS),
            error_message=text(F_ERROR_MESSAGE),
            traceback=text(F_TRACEBACK),
            published_at=when(codec.F_PUBLISHED_AT),
            first_failed_at=when(codec.F_FIRST_FAILED_AT),
            last_failed_at=when(F_LAST_FAILED_AT),
            fields=dict(fields),
        )
