"""JSON for payloads and headers: what Django's ``DjangoJSONEncoder`` writes, never pickle."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import re
import uuid
from collections.abc import Mapping
from typing import Any

from redisq_django.core.errors import PayloadNotSerializable, PayloadTooLarge

_TYPE_IN_MESSAGE = re.compile(r"type '?([\w.]+)'? is not JSON serializable")


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

    def encode_message(
        self, payload: Any, headers: Mapping[str, Any] | None, *, queue: str, limit: int
    ) -> tuple[bytes, bytes | None]:
        """Encode a payload and its headers, which together must fit in ``limit`` bytes.

        Raises:
            PayloadNotSerializable: a value JSON cannot represent.
            PayloadTooLarge: payload and headers together are over ``limit`` bytes.
        """
        payload_json = self.encode_payload(payload, queue=queue, limit=limit)
        headers_json = self.encode_headers(headers, queue=queue)
        if headers_json is not None and len(payload_json) + len(headers_json) > limit:
            size = len(payload_json) + len(headers_json)
            raise PayloadTooLarge(queue, size, limit, headers=len(headers_json))
        return payload_json, headers_json

    def encode_headers(self, headers: Mapping[str, Any] | None, *, queue: str) -> bytes | None:
        """Encode headers (None when there are none).

        Raises:
            PayloadNotSerializable: not a mapping, or a value JSON cannot represent.
        """
        if not headers:
            return None
        if not isinstance(headers, Mapping):
            raise PayloadNotSerializable(queue, "headers", type(headers).__name__)
        return self.dumps(dict(headers), queue=queue, what="headers")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # 1e999: JSON text, but no float holds it
        raise ValueError(f"{text[:40]} is not a finite number")
    return value


# NaN and ±Infinity are no JSON (and our encoder refuses them): another client's entry
# holding one is undecodable rather than handed to a handler.
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)
_SCAN = _DECODER.scan_once  # type: ignore[attr-defined]  # set by its __init__
_JSON_WHITESPACE = " \t\n\r"


def loads(raw: bytes) -> Any:
    """Parse UTF-8 JSON text: ``json.loads`` without its per-call encoding detection and
    whitespace scans, which are a measurable share of a consumer's per-message cost.

    Raises:
        ValueError: not UTF-8, or not one valid JSON value (a byte order mark first
            included: RFC 8259 forbids writing one, and a reader in another language may
            not skip it either, so such text is refused everywhere alike).
    """
    return loads_text(raw.decode("utf-8"))  # a byte order mark decodes to U+FEFF


def loads_text(text: str) -> Any:
    """:func:`loads` of text already decoded (a writer's rows hold ``str``): the same
    values and the same refusals, without encoding it only to decode it again.

    Raises:
        ValueError: not one valid JSON value (a byte order mark first included).
    """
    if text.startswith("\ufeff"):
        raise ValueError("it starts with a byte order mark (U+FEFF), which JSON text may not")
    try:
        value, end = _SCAN(text, 0)  # raw_decode's own call, without its wrapper
    except (StopIteration, ValueError):
        # e.g. leading whitespace; else raises the precise error
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    if end != len(text) and text[end:].strip(_JSON_WHITESPACE):
        raise ValueError(f"Extra data after the JSON value at character {end}")
    return value
