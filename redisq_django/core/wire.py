"""Conversions between redis-py replies (bytes) and Python values."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def to_str(value: Any) -> str:
    """Text of a reply value (bytes are decoded as UTF-8, odd bytes escaped)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return str(value)


def loggable(value: Any) -> str:
    """``value`` as text fit for one log line: itself when every character is printable,
    else its ``repr()`` (quoted; newlines and other control characters escaped), so that
    a string read from Redis (a message id, a task path) never forges a log line."""
    text = to_str(value)
    return text if text.isprintable() else repr(text)


def to_bytes(value: Any) -> bytes:
    """Bytes of a value (text is encoded as UTF-8)."""
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8")


def json_object(value: Any) -> dict[str, Any]:
    """A reply holding a JSON object (an instance's report, say) as a dict; ``{}`` for
    anything else: a missing key, bytes that are not JSON, JSON that is not an object.
    A page or a stat shows such a value as unknown rather than failing."""
    if not isinstance(value, bytes):
        return {}
    try:
        parsed = json.loads(value)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def flatten(fields: Mapping[bytes, bytes]) -> list[bytes]:
    """``{k: v, ...}`` as the flat ``[k, v, ...]`` list XADD and scripts take."""
    out: list[bytes] = []
    for key, value in fields.items():
        out.append(key)
        out.append(value)
    return out
