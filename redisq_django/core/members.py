"""Where a message lives, and a delayed or retry member's fields.

A message is in a stream (a queue's log or a consumer's private input) or a member of a
sorted set (delayed, or waiting for its retry): a JSON object of strings, as
``promote.lua`` writes it to a stream. :func:`member_fields` decodes one;
:func:`peek_member` reads a large one's fields without decoding it whole, for a list.
The ``S_*`` names are the first part of a message's ref (``log:…``, ``retry:…``), which
the operator's pages and an ordered consumer's held keys both give.
"""

from __future__ import annotations

import json
import re

from redisq_django.core import envelope as env

# Where an entry lives (the first part of its ref).
S_LOG, S_DIRECT, S_DELAYED, S_RETRY = "log", "direct", "delayed", "retry"

#: Bytes of a payload decoded for a preview (room for multi-byte characters and spaces
#: around the 140 characters a list shows).
PREVIEW_BYTES = 4 * 140 + 1024

_WS = re.compile(rb"[ \t\n\r]*")
_JSON_STRING_BODY = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def peek_member(member: bytes, keep: int = PREVIEW_BYTES) -> dict[bytes, bytes] | None:
    """A large member's fields without decoding it whole: each value but the payload in
    full, the payload's first ``keep`` bytes (about: an escape is never cut in two).
    None: not a flat JSON object of strings (:func:`member_fields` then decides)."""
    pos, out = _skip(member, 0), {}
    if member[pos : pos + 1] != b"{":
        return None
    pos = _skip(member, pos + 1)
    while member[pos : pos + 1] == b'"':
        key = _JSON_STRING_BODY.match(member, pos + 1)
        if key is None:
            return None
        name, pos = key.group(), _skip(member, key.end())
        if member[pos : pos + 1] != b":":
            return None
        pos = _skip(member, pos + 1)
        if member[pos : pos + 1] != b'"':
            return None
        value = _JSON_STRING_BODY.match(member, pos + 1)
        if value is None:
            return None
        # Slice no more than is kept: a copy of a 20 MB payload is what this avoids
        body = member[pos + 1 : min(value.end() - 1, pos + 1 + keep + 1)]
        is_payload = name == env.F_PAYLOAD + b'"'
        try:
            k = json.loads(b'"' + name)
            v = _head(body, keep) if is_payload else json.loads(member[pos : value.end()])
        except ValueError:
            return None
        if not isinstance(k, str) or not isinstance(v, str):
            return None
        out[k.encode("utf-8", "surrogatepass")] = v.encode("utf-8", "surrogatepass")
        pos = _skip(member, value.end())
        if member[pos : pos + 1] != b",":
            break
        pos = _skip(member, pos + 1)
    return out if member[pos : pos + 1] == b"}" and out else None


def _skip(data: bytes, pos: int) -> int:
    match = _WS.match(data, pos)
    return match.end() if match else pos


def _head(body: bytes, keep: int) -> str:
    """The first ``keep`` bytes of a JSON string's text, decoded: an escape or a UTF-8
    sequence cut in two at the end is dropped (one is at most 6 bytes)."""
    if len(body) <= keep:  # the whole string
        return str(json.loads(b'"' + body + b'"'))
    for end in range(keep, max(0, keep - 7), -1):
        try:
            return str(json.loads(b'"' + body[:end] + b'"'))
        except ValueError:
            continue
    raise ValueError("no JSON string")


def member_fields(member: bytes) -> dict[bytes, bytes]:
    """A delayed or retry member's fields, as ``promote.lua`` writes them to a stream: a
    JSON object of strings (``null``: no such field), else one field ``raw``. For pages:
    ``deliver_now.lua`` flattens the member itself, as ``promote.lua`` does."""
    if member.startswith(b"\xef\xbb\xbf"):  # a byte order mark: no JSON text for Lua's cjson
        return {env.F_RAW_MEMBER: member}
    try:
        decoded = json.loads(member)
    except (ValueError, RecursionError):  # RecursionError: "[[[[…" nested past the limit
        return {env.F_RAW_MEMBER: member}
    if not isinstance(decoded, dict):
        return {env.F_RAW_MEMBER: member}
    out = {}
    for k, v in decoded.items():
        if isinstance(v, str):
            out[k.encode("utf-8", "surrogatepass")] = v.encode("utf-8", "surrogatepass")
        elif v is not None:
            return {env.F_RAW_MEMBER: member}
    return out or {env.F_RAW_MEMBER: member}
