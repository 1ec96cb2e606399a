"""What tells dead letters' causes apart: an error message with what varies between
occurrences of one error (addresses, ports, ids, numbers, durations, quoted values…)
replaced by readable placeholders, as error trackers fingerprint messages."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import cast

#: Normalised error messages (what tells dead letters' causes apart) are cut to this length.
ERROR_KEY_LENGTH = 200
#: Only this many characters of a message are normalised (bounded work whatever its size).
WINDOW = ERROR_KEY_LENGTH * 5
#: A key longer than :data:`ERROR_KEY_LENGTH` keeps this many characters of its start and
#: the rest from its end: a wrapped error names its root cause last (requests' "Max
#: retries exceeded ... (Caused by ...: [Errno 111] Connection refused')").
_HEAD = 100
_CUT = " … "

#: The placeholders a key may hold (the admin shows them as such).
PLACEHOLDERS = (
    "<ip>",
    "<host>",
    "<port>",
    "<duration>",
    "<time>",
    "<uuid>",
    "<hex>",
    "<id>",
    "<n>",
    "<str>",
    "<email>",
    "<value>",
    "<object>",
)

_H16 = r"[0-9A-Fa-f]{1,4}"
_IPV4 = r"\d{1,3}(?:\.\d{1,3}){3}"
# Written out form by form, each bounded, so that no part can match text in more than a
# few ways; a zone id (fe80::1%eth0, %25eth0 in a URL) belongs to the address.
_IPV6 = (
    rf"(?:(?:{_H16}:){{7}}{_H16}"
    rf"|(?:{_H16}:){{6}}{_IPV4}"
    rf"|(?:{_H16}(?::{_H16}){{0,5}})?::(?:{_H16}:){{0,5}}{_IPV4}"
    rf"|{_H16}(?::{_H16}){{0,6}}::(?:{_H16}(?::{_H16}){{0,6}})?"
    rf"|::{_H16}(?::{_H16}){{0,6}}"
    r"|::)"
    r"(?:%[\w.-]{1,32})?"
)
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_PORT = r"(?::(?P<{}>\d{{1,5}}))?"
# The first word of an HTTP reason phrase ("503 Service Unavailable", "429 Too Many
# Requests", "404 Client Error: Not Found"): the number before it is a status.
_REASONS = (
    "Accepted|Already|Bad|Client|Conflict|Continue|Created|Expectation|Failed|Forbidden|"
    "Found|Gateway|Gone|HTTP|IM|Insufficient|Internal|Length|Locked|Loop|Method|Misdirected|"
    "Moved|Multi|Multiple|Network|No|Non|Not|OK|Partial|Payload|Payment|Permanent|"
    "Precondition|Proxy|Range|Request|Requested|Reset|See|Server|Service|Switching|"
    "Temporary|Too|Unauthorized|Unavailable|Unprocessable|Unsupported|Upgrade|URI|Use|"
    "Variant"
)
_FILE_TYPES = (
    "(?:csv|tsv|json|jsonl|xml|ya?ml|txt|log|pdf|html?|css|js|py|tex|png|jpe?g|gif|svg|zip|gz|"
    "tar|parquet|xlsx?|docx?)"
)
_GLUED_UNITS = r"(?:ns|us|µs|ms|s|m|h)"
_UNIT_WORDS = r"(?:(?:nano|micro|milli)?seconds?|ms|msecs?|secs?|minutes?|mins?|hours?|hrs?|days?)"
_NUMBER = r"\d+(?:\.\d+)?"

#: The rules, by name, in the order they are tried where several could start at one
#: place. One pass over the text: what one rule replaced is never read by another (an
#: address is one placeholder, never a number and a code), and a number a rule keeps
#: (``[Errno 111]``, ``HTTP 503``) is kept. Every rule starts only where a word, number
#: or quote starts and stops at a bound or a character it cannot hold, so the pass
#: stays linear in the text's length whatever it holds.
_RULES: tuple[tuple[str, str], ...] = (
    # A word of letters before a space or punctuation, unless a rule below starts with it,
    # is text: passed over whole instead of trying every rule at each of its letters.
    (
        "text",
        r"(?!(?i:errno|error|status|https?|exit|return|sqlstate|port|timeout)\b)"
        r"[A-Za-z]+(?=[\s,;!?)]|$)",
    ),
    # -- kept: numbers and names that are the error's identity -----------------------
    # An errno, an HTTP status or exit status, after the word that says so.
    (
        "kept_code",
        r"\b(?:[Ee]rrno[ =]|[Ee]rror |ERROR |(?i:status(?:[ _]code)?|https?(?:/[\d.]{1,3})?"
        r"|exit (?:code|status)|return ?code)(?:[ :=]{1,2}))-?\d{1,5}\b",
    ),
    ("kept_sqlstate", r"(?i:\bsqlstate)[ :=\[]{0,2}[0-9A-Z]{5}\b"),
    # The code of an OSError's, a database driver's or an SMTP server's (code, 'message').
    ("kept_errno_tuple", r"(?<=\()-?\d{1,5}(?=, b?['\"])"),
    ("kept_status", rf"(?<![\w.])[1-5]\d\d(?= (?=[A-Z])(?i:{_REASONS})\b)"),
    # A dotted path to a class (urllib3.connection.HTTPSConnection) is a name.
    ("kept_class", r"(?<![\w.])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\.[A-Z]\w*"),
    # -- what may hold anything: taken whole ------------------------------------------
    ("object", r"<[\w.]{1,200} object at 0x[0-9a-fA-F]{1,16}>"),
    ("query", r"(?<=[?&])(?P<query_name>[\w.%-]{1,100})=[^&#\s'\"<>]+"),
    ("email", r"(?<![\w.+-])[\w.+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63})+"),
    # A quote no word touches from outside: the apostrophe of "can't" opens nothing.
    ("quoted", r"(?<!\w)'[^'\n]{0,300}'(?!\w)|(?<!\w)\"[^\"\n]{0,300}\"(?!\w)|“[^”\n]{0,300}”"),
    # PostgreSQL's DETAIL: "Key (sku)=(X-1) already exists", "Failing row contains (…)."
    ("key_value", r"(?<=\)=)\([^()\n]{0,300}\)"),
    ("failing_row", r"(?<=Failing row contains )\([^\n]{0,300}?\)(?=\.?(?:\n|$))"),
    # -- times, ids, addresses ----------------------------------------------------------
    (
        "time",
        r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
        r"|(?<![\w:.])\d{1,2}:\d{2}:\d{2}(?:\.\d+)?(?![\w:])",
    ),
    ("uuid", r"\b[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}\b"),
    ("hex", r"\b0x[0-9a-fA-F]+\b"),
    ("ip6_bracketed", rf"\[{_IPV6}\]" + _PORT.format("ip6_port")),
    ("ip6", rf"(?<![\w:.%-]){_IPV6}(?![\w:%-])"),
    ("ip4", rf"(?<![\w.]){_IPV4}" + _PORT.format("ip4_port") + r"(?!\w|\.\d)"),
    # A host name: labels, then a top-level one of letters (not a file's extension, nor
    # after a lone slash: a path); with a digit somewhere it is one of many (db-3.internal,
    # ip-10-0-0-12.ec2.internal), without one it is kept.
    (
        "host",
        rf"(?<![\w.@%-])(?<!(?<!/)/)(?P<host_name>(?:{_LABEL}\.)+(?!{_FILE_TYPES}\b)[a-z]{{2,63}})"
        + _PORT.format("host_port")
        + r"(?![\w-]|\.\w)",
    ),
    # A name and a port (localhost:6379, redis:6379, db3:5432).
    (
        "name_port",
        r"(?<![\w.@%-])(?P<np_name>[A-Za-z][A-Za-z0-9-]{0,62}):\d{1,5}(?![\w:]|\.\d)",
    ),
    ("port", r"\b(?P<port_word>[Pp]ort[ =:]{1,2})\d{1,5}\b"),
    ("timeout", rf"\b(?P<timeout_word>(?i:timeout)[ =:]{{1,2}}){_NUMBER}{_GLUED_UNITS}?\b"),
    (
        "duration",
        rf"(?<![\w.]){_NUMBER}(?: ?{_UNIT_WORDS}|{_GLUED_UNITS}(?:{_NUMBER}{_GLUED_UNITS})*)\b",
    ),
    # -- what is left: ids and numbers --------------------------------------------------
    ("stream_id", r"\b\d+-\d+\b"),
    # Codes: a word (letters, digits, _ or -) holding a digit and a letter (X0001,
    # SKU-42A, ord_9f3k, a hex id), or a random id after a prefix (req_AbCdEfGhIjKl);
    # a word of letters only (card_declined, ThrottlingException) is text and stays.
    (
        "code",
        r"(?<![\w-])(?:(?=[\w-]*\d)(?=[\w-]*[^\W\d_])[\w-]+"
        r"|[a-z]{2,8}_(?=[A-Za-z0-9]*[A-Z0-9])[A-Za-z0-9]{6,})(?![\w-])",
    ),
    ("number", r"(?<![\w.])[-+]?\d+(?:\.\d+)*\b"),
    ("space", r"\s+"),
)

_WORD = re.compile(r"\w+")
# What follows a key naming an error's code, type or reason is its identity, when it is
# a word (card_declined, RESOURCE_EXHAUSTED), not a number or an id.
_CODE_KEY = re.compile(r"(?i:code|error|type|reason|status)['\"]?[ ]?[:=][ ]?$")
_CODE = re.compile(r"[A-Za-z][A-Za-z_-]{0,63}")
_STATUS_LINE = re.compile(r"[1-5]\d\d [A-Z]")
_TOKENS = re.compile("|".join(f"(?P<{name}>{pattern})" for name, pattern in _RULES))


def _port(match: re.Match[str], group: str) -> str:
    return ":<port>" if match.group(group) else ""


def _quoted(match: re.Match[str]) -> str:
    """A quoted value, or a message quoted inside the message (normalised in turn)."""
    quoted, text = match.group(), match.string
    inner = quoted[1:-1]
    opened_after = text[max(0, match.start() - 2) : match.start()]
    closed_before = text[match.end() : match.end() + 1]
    in_repr = opened_after[-1:] in ("(", "[") or opened_after == ", "
    dict_key = closed_before == ":" and (opened_after[-1:] == "{" or opened_after == ", ")
    if dict_key and _WORD.fullmatch(inner):
        return quoted  # a key of a dict's repr: {'email': ['Enter a valid …']}
    if _CODE.fullmatch(inner) and _CODE_KEY.search(
        text[max(0, match.start() - 24) : match.start()]
    ):
        return quoted  # an error's code in a body: {"code": "card_declined"}
    if _STATUS_LINE.match(inner) or (" " in inner and (inner[-1] in ".!?" or in_repr)):
        # A sentence, a status line, or the argument of an exception's repr:
        # NewConnectionError('…: [Errno 111] Connection refused'), (104, 'Connection
        # reset by peer'), ['“x” is not a valid UUID.']: the message, not a value.
        return quoted[0] + _normalise(inner) + quoted[-1]
    return "<str>"


def _host(match: re.Match[str]) -> str:
    name = match.group("host_name")
    return ("<host>" if any(c.isdigit() for c in name) else name) + _port(match, "host_port")


def _name_and_port(match: re.Match[str]) -> str:
    name = match.group("np_name")
    return ("<host>" if any(c.isdigit() for c in name) else name) + ":<port>"


def _kept(match: re.Match[str]) -> str:
    return match.group()


_REPLACE: dict[str, Callable[[re.Match[str]], str]] = {
    "text": _kept,
    "kept_code": _kept,
    "kept_sqlstate": _kept,
    "kept_errno_tuple": _kept,
    "kept_status": _kept,
    "kept_class": _kept,
    "object": lambda m: "<object>",
    "query": lambda m: m.group("query_name") + "=<value>",
    "email": lambda m: "<email>",
    "quoted": _quoted,
    "key_value": lambda m: "(<value>)",
    "failing_row": lambda m: "(<value>)",
    "time": lambda m: "<time>",
    "uuid": lambda m: "<uuid>",
    "hex": lambda m: "<hex>",
    "ip6_bracketed": lambda m: "<ip>" + _port(m, "ip6_port"),
    "ip6": lambda m: "<ip>",
    "ip4": lambda m: "<ip>" + _port(m, "ip4_port"),
    "host": _host,
    "name_port": _name_and_port,
    "port": lambda m: m.group("port_word") + "<port>",
    "timeout": lambda m: m.group("timeout_word") + "<duration>",
    "duration": lambda m: "<duration>",
    "stream_id": lambda m: "<id>",
    "code": lambda m: "<id>",
    "number": lambda m: "<n>",
    "space": lambda m: " ",
}


def _replace(match: re.Match[str]) -> str:
    return _REPLACE[cast(str, match.lastgroup)](match)  # every rule is a named group


def _normalise(text: str) -> str:
    return _TOKENS.sub(_replace, text)


def normalise_error(message: str) -> str:
    """``message`` with what varies between occurrences of one error replaced by
    placeholders and whitespace collapsed, cut to :data:`ERROR_KEY_LENGTH`: dead letters
    with the same error class and normalised message are one cause in the admin and
    ``redisq dead causes``.

    Replaced: IPv4 and IPv6 addresses (``<ip>``, bracketed, with a zone id, v4-mapped),
    ports after an address or a host or the word "port" (``<port>``), host names holding
    a digit (``<host>``: ``db-3.internal``), durations (``<duration>``: ``30.5s``,
    ``5000ms``, ``1.2 seconds``, ``timeout=10``), times, UUIDs, ``0x`` hex, ids and codes
    holding digits (``<id>``), other numbers (``<n>``), quoted values (``<str>``),
    e-mail addresses, URL query values and PostgreSQL's key values (``<value>``) and
    Python's default object reprs (``<object>``). Kept, as they tell errors apart: an
    errno (``[Errno 111]``, ``Error 111 connecting``), an HTTP status (``503 Service
    Unavailable``, ``HTTP 429``, ``status=404``), an SQLSTATE, words without digits
    (``card_declined``), a quoted code after a key naming it (``"code": "card_declined"``),
    and a sentence quoted inside the message (normalised in turn).

    A key longer than :data:`ERROR_KEY_LENGTH` keeps its start and its end (where a
    wrapped error names its cause), unless the message was longer than :data:`WINDOW`.

    >>> normalise_error("Order 1234 declined at 2024-05-01T12:00:00Z (card 0x7f3a)")
    'Order <n> declined at <time> (card <hex>)'
    >>> normalise_error("unknown SKU X0001 for 'ann@example.com'")
    'unknown SKU <id> for <str>'
    >>> normalise_error("Error 111 connecting to 10.0.0.5:6379. Connection refused.")
    'Error 111 connecting to <ip>:<port>. Connection refused.'
    """
    key = _normalise(message[:WINDOW]).strip()
    if len(key) <= ERROR_KEY_LENGTH or len(message) > WINDOW:
        return key[:ERROR_KEY_LENGTH]
    # Cut between words: never half a placeholder.
    head = key[:_HEAD].rsplit(" ", 1)[0]
    tail = key[len(key) - (ERROR_KEY_LENGTH - len(head) - len(_CUT)) :]
    return head + _CUT + (tail.split(" ", 1)[-1] if " " in tail else tail)
