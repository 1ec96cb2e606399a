"""Conversions between redis-py replies (bytes) and Python values."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

#: An integer on the wire (an envelope's ``attempts`` and times, in a stream entry or a
#: delayed or retry member) is 1 to this many ASCII digits and nothing else: no sign, no
#: space, no ``0x``, ``5e0`` or ``5_0`` (which Python's ``int()`` or Lua's ``tonumber``
#: would take), leading zeros allowed. Every such number is exact in a double, the only
#: number type of Lua and JavaScript: every language reads the same value, or refuses.
MAX_INT_DIGITS = 15


def wire_int(raw: bytes | str) -> int | None:
    """``raw`` as an integer of the wire (see :data:`MAX_INT_DIGITS`), else None."""
    if 0 < len(raw) <= MAX_INT_DIGITS and raw.isascii() and raw.isdigit():
        return int(raw)
    return None


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


def visible(text: str) -> str:
    """``text`` with every character that does not print as its escape (``\\n``,
    ``\\u202e``): line breaks, tabs, right-to-left and left-to-right overrides and
    isolates, zero-width and other invisible characters. What a reader sees is then what
    the text holds (``"\\u202egnp.exe"`` never reads as "exe.png"). ``manage.py redisq
    held`` and the admin show any text another client may have written through it."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def to_bytes(value: Any) -> bytes:
    """Bytes of a value (text is encoded as UTF-8)."""
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8")


def json_object(value: Any) -> dict[str, Any]:
    """A reply holding a JSON object (an instance's report, say) as a dict; ``{}`` for
    anything else: a missing key, bytes that are not JSON, JSON that is not an object.
    A page or a stat shows such a value as unknown rather than failing."""
    return json_object_or_reason(value)[0]


def json_object_or_reason(value: Any) -> tuple[dict[str, Any], str]:
    """:func:`json_object`, and why the value is unreadable ("" when it was read, or is
    missing): bytes that are not JSON, JSON nested too deep, JSON that is no object."""
    if not isinstance(value, bytes):
        return {}, ""
    try:
        parsed = json.loads(value)
    except ValueError:
        return {}, "not JSON"
    except RecursionError:  # any client may write "[[[[…": a parse must not take a page down
        return {}, "JSON nested too deep"
    if not isinstance(parsed, dict):
        return {}, "not a JSON object"
    return parsed, ""


def flatten(fields: Mapping[bytes, bytes]) -> list[bytes]:
    """``{k: v, ...}`` as the flat ``[k, v, ...]`` list XADD and scripts take."""
    out: list[bytes] = []
    for key, value in fields.items():
        out.append(key)
        out.append(value)
    return out
