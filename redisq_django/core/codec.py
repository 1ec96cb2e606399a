"""The envelope: how a message is laid out in Redis, and JSON for payloads.

A stream entry is a flat map of fields (PROTOCOL.md, "Envelope v1"). Only ``payload`` is
required, so ``XADD redisq:{q}:log * payload '{"a":1}'`` from any client is a valid
message. Zset members (delayed messages, retries) hold the same map as one JSON object.
No pickle, ever: payloads and headers are JSON.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
import uuid
from collections.abc import Mapping
from typing import Any, NamedTuple

from redisq_django.core.errors import PayloadNotSerializable, PayloadTooLarge

ENVELOPE_VERSION = 1

# Field names (bytes, as redis-py returns them).
F_VERSION = b"v"
F_PAYLOAD = b"payload"
F_HEADERS = b"headers"
F_ID = b"id"
F_PUBLISHED_AT = b"published_at"
F_ATTEMPTS = b"attempts"
F_FIRST_FAILED_AT = b"first_failed_at"
F_DUE_AT = b"due_at"

#: Fields that a retry or re-drive carries over from the entry it came from.
CARRIED_FIELDS = (F_VERSION, F_PAYLOAD, F_HEADERS, F_ID, F_PUBLISHED_AT, F_DUE_AT)

_TYPE_IN_MESSAGE = re.compile(r"type '?([\w.]+)'? is not JSON serializable")


class UndecodableEntry(ValueError):
    """A Redis entry is not a valid envelope; ``reason`` says why."""


def _duration_iso(value: dt.timedelta) -> str:
    # ISO 8601 duration, the format Django's JSON encoder uses for timedelta.
    days, seconds, micros = value.days, value.seconds, value.microseconds
    sign = "-" if days < 0 else ""
    if days < 0:
        total = -value
        days, seconds, micros = total.days, total.seconds, total.microseconds
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    frac = f".{micros:06d}" if micros else ""
    return f"{sign}P{days}DT{hours:02d}H{minutes:02d}M{secs:02d}{frac}S"


class PayloadEncoder(json.JSONEncoder):
    """JSON encoder for payloads, producing what Django's ``DjangoJSONEncoder`` produces.

    datetime/time are ISO 8601 with millisecond precision (``Z`` for UTC), date is ISO,
    timedelta is an ISO 8601 duration, Decimal and UUID are strings.
    """

    def default(self, o: Any) -> Any:
        if isinstance(o, dt.datetime):
            text = o.isoformat()
            if o.microsecond:
                text = text[:23] + text[26:]
            if text.endswith("+00:00"):
                text = text[:-6] + "Z"
            return text
        if isinstance(o, dt.date):
            return o.isoformat()
        if isinstance(o, dt.time):
            if o.utcoffset() is not None:
                raise TypeError("Object of type 'aware time' is not JSON serializable")
            text = o.isoformat()
            return text[:12] if o.microsecond else text
        if isinstance(o, dt.timedelta):
            return _duration_iso(o)
        if isinstance(o, decimal.Decimal | uuid.UUID):
            return str(o)
        return super().default(o)


class JsonCodec:
    """Encodes payloads and headers to compact UTF-8 JSON with one reusable encoder."""

    def __init__(self, encoder_class: type[json.JSONEncoder]) -> None:
        self._encoder = encoder_class(separators=(",", ":"), ensure_ascii=False, allow_nan=False)

    def dumps(self, value: Any, *, queue: str, what: str = "payload") -> bytes:
        """Encode ``value``.

        Raises:
            PayloadNotSerializable: naming the type JSON cannot represent.
        """
        try:
            return self._encoder.encode(value).encode("utf-8")
        except TypeError as exc:
            match = _TYPE_IN_MESSAGE.search(str(exc))
            raise PayloadNotSerializable(
                queue, what, match.group(1) if match else str(exc)
            ) from exc
        except UnicodeEncodeError as exc:  # before ValueError, of which it is a subclass
            raise PayloadNotSerializable(queue, what, "str with a lone surrogate") from exc
        except ValueError as exc:  # NaN/Infinity, circular references
            raise PayloadNotSerializable(queue, what, f"value rejected by JSON: {exc}") from exc
        except RecursionError as exc:
            raise PayloadNotSerializable(queue, what, "value nested too deeply") from exc

    def encode_payload(self, value: Any, *, queue: str, limit: int) -> bytes:
        """Encode a payload and enforce the size limit.

        Raises:
            PayloadNotSerializable: a value JSON cannot represent.
            PayloadTooLarge: the encoding is over ``limit`` bytes.
        """
        data = self.dumps(value, queue=queue)
        if len(data) > limit:
            raise PayloadTooLarge(queue, len(data), limit)
        return data

    def encode_headers(self, headers: Mapping[str, Any] | None, *, queue: str) -> bytes | None:
        if not headers:
            return None
        if not isinstance(headers, Mapping):
            raise PayloadNotSerializable(queue, "headers", type(headers).__name__)
        return self.dumps(dict(headers), queue=queue, what="headers")


def ms_from_entry_id(entry_id: bytes | str) -> int:
    """The millisecond part of a stream entry id."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.split("-", 1)[0])


def ms_to_datetime(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000.0, tz=dt.UTC)


def _int_field(fields: Mapping[bytes, bytes], name: bytes) -> int | None:
    raw = fields.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise UndecodableEntry(f"field {name.decode()!r} is not an integer") from None
    if value < 0:
        raise UndecodableEntry(f"field {name.decode()!r} is negative")
    return value


_DECODER = json.JSONDecoder()
_JSON_WHITESPACE = " \t\n\r"


def loads(raw: bytes) -> Any:
    """Parse UTF-8 JSON text: ``json.loads`` without its per-call encoding detection and
    whitespace scans, which are a measurable share of a consumer's per-message cost.

    Raises:
        ValueError: not UTF-8, or not one valid JSON value.
    """
    text = raw.decode("utf-8")
    try:
        value, end = _DECODER.raw_decode(text)
    except ValueError:
        return json.loads(text)  # e.g. leading whitespace; else raises the precise error
    if end != len(text) and text[end:].strip(_JSON_WHITESPACE):
        raise ValueError(f"Extra data after the JSON value at character {end}")
    return value


class Decoded(NamedTuple):
    """The parts of a valid envelope."""

    id: str
    payload: Any
    headers: dict[str, Any]
    attempts: int
    published_at_ms: int
    first_failed_at_ms: int | None
    due_at_ms: int | None


def decode_fields(entry_id: bytes, fields: Mapping[bytes, bytes]) -> Decoded:
    """Validate an envelope and return its parts.

    Raises:
        UndecodableEntry: the entry is not a valid envelope; the message says why.
    """
    raw_payload = fields.get(F_PAYLOAD)
    if raw_payload is None:
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
        raise UndecodableEntry(f"unsupported envelope version {version[:20]!r}")
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
    published = _int_field(fields, F_PUBLISHED_AT)
    return Decoded(
        message_id,
        payload,
        headers,
        _int_field(fields, F_ATTEMPTS) or 0,
        published if published is not None else ms_from_entry_id(entry_id),
        _int_field(fields, F_FIRST_FAILED_AT),
        _int_field(fields, F_DUE_AT),
    )


def describe_raw(fields: Mapping[bytes, bytes]) -> bytes:
    """A JSON rendering of arbitrary entry fields, kept with an undecodable dead letter."""
    readable = {
        k.decode("utf-8", "backslashreplace"): v.decode("utf-8", "backslashreplace")
        for k, v in fields.items()
    }
    return json.dumps(readable, ensure_ascii=False).encode("utf-8", "backslashreplace")
