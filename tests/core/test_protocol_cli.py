"""PROTOCOL.md followed by a client in another language: every operation is done with the
``redis-cli`` binary and the shipped Lua scripts only (``SCRIPT LOAD`` of the files,
then ``EVALSHA``), as the document says, and the outcome is checked in Redis and through
our Python side (issue 8, "A protocol other languages can follow safely").

The foreign client here is ``redis-cli`` itself: every call is a new ``redis-cli`` process
whose ``--no-raw`` reply is parsed from its text, so nothing of redis-py or of our code
shapes what is sent. Key names are spelled out as PROTOCOL.md writes them.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

import redisq_django.core.scripts as shipped_scripts
from redisq_django.core import Broker, CoreConfig, Outcome, Reject
from tests.core.guarantee_helpers import drain, fetch_nothing

#: The script files as shipped in the package (the same files as in the repository).
SCRIPTS_DIR = Path(shipped_scripts.__file__).parent
#: Bound on one redis-cli call.
CLI_TIMEOUT_S = 10
#: ARGV[1] of every script call, as PROTOCOL.md spells it ("Versions and upgrades").
PROTOCOL = "redisq/2"


# -- a foreign client: redis-cli and the script files --------------------------------------


class CliError(Exception):
    """redis-cli printed an error reply."""


_MARKER = re.compile(r" *(\d+)\) ")
_ESCAPES = {"n": b"\n", "r": b"\r", "t": b"\t", "a": b"\a", "b": b"\b", '"': b'"', "\\": b"\\"}


def _unquote(text: str) -> str:
    """A ``"..."`` string as redis-cli prints it (C escapes, ``\\xHH`` for other bytes)."""
    assert text[0] == '"' and text[-1] == '"', text
    body, out, i = text[1:-1], bytearray(), 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode()
            i += 1
        elif body[i + 1] == "x":
            out.append(int(body[i + 2 : i + 4], 16))
            i += 4
        else:
            out += _ESCAPES[body[i + 1]]
            i += 2
    return out.decode("utf-8")


def _scalar(text: str) -> Any:
    if text.startswith("(error)"):
        raise CliError(text.removeprefix("(error) "))
    if text.startswith("(integer) "):
        return int(text.removeprefix("(integer) "))
    if text == "(nil)":
        return None
    if text == "(empty array)":
        return []
    if text.startswith('"'):
        return _unquote(text)
    return text  # a status reply: OK, QUEUED


def parse_no_raw(output: str) -> Any:
    """One reply as ``redis-cli --no-raw`` prints it, as Python values (arrays as lists).

    Array elements are ``N) value`` lines; a nested array starts on its parent's line,
    its elements aligned (right, as " 9)" over "10)") under its first marker, so the
    column where a marker ends gives its depth.
    """
    lines = output.rstrip("\n").split("\n")
    if not _MARKER.match(lines[0]):
        return _scalar(lines[0])
    root: list[Any] = []
    stack: list[tuple[int, list[Any]]] = []
    for line in lines:
        pos, slot = 0, None
        while (m := _MARKER.match(line, pos)) is not None:
            col = m.end(1)  # right-aligned: " 9)" and "10)" end in one column
            if slot is None:  # the first marker of the line: an element at its depth
                while stack and stack[-1][0] > col:
                    stack.pop()
                if not stack:
                    stack.append((col, root))
                target = stack[-1][1]
            else:  # a nested array opens as the value of the marker before it
                target = []
                slot[0][slot[1]] = target
                stack.append((col, target))
            target.append(None)
            slot = (target, len(target) - 1)
            pos = m.end()
        assert slot is not None, line
        slot[0][slot[1]] = _scalar(line[pos:])
    return root


@dataclass
class Cli:
    """``redis-cli -h 127.0.0.1 -p PORT --no-raw`` and the shipped scripts."""

    binary: str
    port: int
    shas: dict[str, str] = field(default_factory=dict)

    def _run(self, args: list[str], stdin: str | None = None) -> str:
        result = subprocess.run(
            [self.binary, "-h", "127.0.0.1", "-p", str(self.port), "--no-raw", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            check=True,
        )
        return result.stdout

    def __call__(self, *args: Any) -> Any:
        """One command; its reply parsed (an error reply raises :class:`CliError`)."""
        return parse_no_raw(self._run([str(a) for a in args]))

    def lines(self, commands: str) -> str:
        """Commands on stdin, one a line (one connection: MULTI works); the raw output."""
        return self._run([], stdin=commands)

    def load(self, name: str) -> str:
        """``redis-cli -x SCRIPT LOAD < <name>.lua``: the SHA1 to call it with."""
        text = (SCRIPTS_DIR / f"{name}.lua").read_text()
        return str(parse_no_raw(self._run(["-x", "SCRIPT", "LOAD"], stdin=text)))

    def script(self, name: str, keys: list[str], args: list[Any], *, version: Any = None) -> Any:
        """EVALSHA the shipped script ``name`` with the protocol version first (``version``:
        another token, ``()``: none); on NOSCRIPT, load it and call again."""
        token = [PROTOCOL] if version is None else list(version)
        call = [len(keys), *keys, *token, *args]
        try:
            return self("EVALSHA", self.load_cached(name), *call)
        except CliError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
            self.shas[name] = self.load(name)
            return self("EVALSHA", self.shas[name], *call)

    def load_cached(self, name: str) -> str:
        if name not in self.shas:
            self.shas[name] = self.load(name)
        return self.shas[name]

    def now_ms(self) -> int:
        """Redis's clock (``TIME``), in ms."""
        seconds, micros = self("TIME")
        return int(seconds) * 1000 + int(micros) // 1000


@dataclass(frozen=True)
class Keys:
    """Keys of one queue as PROTOCOL.md spells them (prefix ``redisq``)."""

    queue: str

    def _q(self, rest: str) -> str:
        return f"redisq:{{{self.queue}}}:{rest}"

    @property
    def log(self) -> str:
        return self._q("log")

    @property
    def delayed(self) -> str:
        return self._q("delayed")

    @property
    def meta(self) -> str:
        return self._q("meta")

    @property
    def events(self) -> str:
        return self._q("events")

    @property
    def archives(self) -> str:
        return self._q("archives")

    def sent(self, message_id: str) -> str:
        return self._q(f"sent:{message_id}")

    def batch(self, batch_id: str) -> str:
        return self._q(f"batch:{batch_id}")

    def direct(self, g: str) -> str:
        return self._q(f"g:{g}:direct")

    def retry(self, g: str) -> str:
        return self._q(f"g:{g}:retry")

    def dead(self, g: str) -> str:
        return self._q(f"g:{g}:dead")

    def instances(self, g: str) -> str:
        return self._q(f"g:{g}:instances")

    def running(self, g: str) -> str:
        return self._q(f"g:{g}:running")

    def group_sent(self, g: str, message_id: str) -> str:
        return self._q(f"g:{g}:sent:{message_id}")

    def settle(self, g: str) -> list[str]:
        """The seven KEYS of every settling script (PROTOCOL.md, "The settle layout")."""
        return [self.log, *[self._q(f"g:{g}:{k}") for k in SETTLED], self.events]


#: The group's keys in the settle layout, after the log.
SETTLED = ("direct", "retry", "dead", "holders", "held_back")


def settle_args(
    g: str, instance: str, entries: list[tuple[str, str, str]], event: dict[str, Any], *own: Any
) -> list[Any]:
    """ARGV of a settling script after the token (PROTOCOL.md, "The settle layout"), for a
    consumer that is not ordered: entries are ``(log or direct, entry id, message id)``."""
    head = [g, instance, "", len(entries)]
    entered = [x for stream, entry_id, mid in entries for x in (stream, entry_id, mid, "")]
    return [*head, *entered, len(event), *flat(event), *own]


def pairs(flat: list[str]) -> dict[str, str]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def flat(fields: dict[str, Any]) -> list[str]:
    return [str(x) for kv in fields.items() for x in kv]


@dataclass
class ForeignConsumer:
    """One instance of a logical consumer written from PROTOCOL.md with redis-cli only.

    Attributes:
        max_retries: shared with every instance of the consumer (PROTOCOL.md).
    """

    cli: Cli
    keys: Keys
    group: str
    instance: str
    max_retries: int = 5

    def ensure(self, start: str = "$") -> int:
        return int(
            self.cli.script(
                "ensure_consumer",
                [self.keys.meta, self.keys.log, self.keys.direct(self.group)],
                [1, self.group, start],
            )
        )

    def promote(self) -> list[int]:
        """promote.lua by Redis's clock: ``[from delayed, from retry, next due, now]``."""
        k = self.keys
        return list(
            self.cli.script(
                "promote", [k.delayed, k.log, k.retry(self.group), k.direct(self.group)], ["", 1000]
            )
        )

    def heartbeat(self, ttl_ms: int) -> int:
        """heartbeat.lua: alive until Redis's now + ``ttl_ms`` (negative: dead now)."""
        return int(
            self.cli.script("heartbeat", [self.keys.instances(self.group)], [self.instance, ttl_ms])
        )

    def start(self, stream: str, entry_id: str) -> None:
        """Record the handler about to start (``running``), as PROTOCOL.md's *Consume*."""
        tag = "direct" if stream == self.keys.direct(self.group) else "log"
        self.cli("HSET", self.keys.running(self.group), self.instance, f"{tag}:{entry_id}")

    def reclaim(self, visibility_timeout_ms: int) -> list[Any]:
        """reclaim.lua by Redis's clock, from the start of both streams."""
        k, g = self.keys, self.group
        return list(
            self.cli.script(
                "reclaim",
                [k.log, k.direct(g), k.instances(g), k.running(g)],
                [g, self.instance, visibility_timeout_ms, 100, "", "0-0", "0-0"],
            )
        )

    def fetch(self, count: int = 10) -> list[tuple[str, str, dict[str, str]]]:
        """XREADGROUP of both streams: ``[(stream key, entry id, fields)]``."""
        k = self.keys
        reply = self.cli(
            "XREADGROUP", "GROUP", self.group, self.instance, "COUNT", count,
            "STREAMS", k.log, k.direct(self.group), ">", ">",
        )  # fmt: skip
        out = []
        for stream, entries in reply or []:
            for entry_id, fields in entries:
                out.append((stream, entry_id, pairs(fields)))
        return out

    def settle(
        self, stream: str, entry_id: str, mode: str, due: int | str, fields: dict[str, Any]
    ) -> int:
        """fail.lua: retry (``mode`` "retry", due at ``due``) or dead-letter the entry."""
        k, g = self.keys, self.group
        entry = ("direct" if stream == k.direct(g) else "log", entry_id, fields.get("id", entry_id))
        args = settle_args(g, self.instance, [entry], {}, mode, due, *flat(fields))
        return int(self.cli.script("fail", k.settle(g), args))

    def next_delivery(
        self, entry_id: str, fields: dict[str, str], attempts: int, now: int, *, failed: bool
    ) -> dict[str, Any]:
        """The envelope of the next delivery, as PROTOCOL.md's *Fail* says."""
        out = {k: v for k, v in fields.items() if k not in ("attempts", "first_failed_at")}
        out["id"] = fields.get("id", entry_id)
        out["published_at"] = fields.get("published_at", entry_id.split("-")[0])
        out["attempts"] = attempts
        first = fields.get("first_failed_at")
        if first is not None or failed:
            out["first_failed_at"] = first if first is not None else now
        return out

    def fail(self, stream: str, entry_id: str, fields: dict[str, str], error: str) -> str:
        """A failed delivery just read (delivery count 1): retry or dead letter."""
        now = self.cli.now_ms()
        d = int(fields.get("attempts", "0")) + 1  # deliveries so far
        envelope = self.next_delivery(entry_id, fields, d, now, failed=True)
        if d < self.max_retries + 1:
            # "+<ms>": due that long after now by Redis's clock (a fixed 20 ms backoff here)
            assert self.settle(stream, entry_id, "retry", "+20", envelope) == 1
            return "retry"
        dead = {
            **envelope,
            "reason": "failed",
            "error_class": "TypeError",
            "error_message": error,
            "traceback": f"at handler (billing.js:12:5)\nTypeError: {error}",
            "last_failed_at": now,
            "group": self.group,
        }
        assert self.settle(stream, entry_id, "dead", 0, dead) == 1
        return "dead"


@pytest.fixture
def cli(redis_cli_binary: str, redis_url: str) -> Cli:
    port = urlparse(redis_url).port
    assert port is not None
    return Cli(redis_cli_binary, port)


@pytest.fixture
def keys(queue_name: str) -> Keys:
    return Keys(queue_name)


pytestmark = pytest.mark.core_config(poll_interval_ms=20)


def foreign(cli: Cli, keys: Keys, instance: str = "node-1", **kw: Any) -> ForeignConsumer:
    return ForeignConsumer(cli, keys, "billing", instance, **kw)


# -- publishing ----------------------------------------------------------------------------


def test_cli_publish_and_consume_both_ways_with_python(
    cli: Cli, keys: Keys, broker: Broker, queue_name: str
) -> None:
    # Given logical consumer billing registered by the foreign client (ensure_consumer.lua)
    node = foreign(cli, keys)
    assert node.ensure() == 1
    assert node.ensure() == 0  # an existing group is left alone
    groups = {pairs(g)["name"] for g in cli("XINFO", "GROUPS", keys.direct("billing"))}
    assert groups == {"billing"}
    assert cli("SADD", "redisq:queues", queue_name) == 1
    py = broker.subscribe(queue_name, "billing", "py-1")

    # When redis-cli publishes with XADD
    entry = cli("XADD", keys.log, "*", "payload", '{"order":42,"name":"é"}', "headers", '{"t":"a"}')
    # Then a Python instance handles it: the entry id is the message id
    [msg] = drain(py, expected=1)
    assert (msg.id, msg.payload, msg.headers, msg.attempts) == (
        entry,
        {"order": 42, "name": "é"},
        {"t": "a"},
        1,
    )
    assert queue_name in broker.queues()

    # When Python publishes, the foreign instance reads it with XREADGROUP and acks (XACK)
    published = broker.publish(queue_name, {"order": 43}, headers={"h": 1})
    [(stream, entry_id, fields)] = node.fetch()
    assert (stream, entry_id) == (keys.log, published)
    assert json.loads(fields["payload"]) == {"order": 43}
    assert json.loads(fields["headers"]) == {"h": 1}
    assert cli("XACK", keys.log, "billing", entry_id) == 1
    assert cli("XPENDING", keys.log, "billing")[0] == 0

    # And a replay (XGROUP SETID) delivers both again to billing only
    assert cli("XGROUP", "SETID", keys.log, "billing", "0-0") == "OK"
    again = drain(py, expected=2)
    assert [m.id for m in again] == [entry, published]


def test_cli_batch_publish_is_all_or_none(
    cli: Cli, keys: Keys, broker: Broker, queue_name: str
) -> None:
    # Given a registered consumer
    assert foreign(cli, keys).ensure() == 1
    # When two XADDs go in one MULTI/EXEC
    out = cli.lines(
        f"MULTI\nXADD {keys.log} * payload '{{\"n\":1}}'\n"
        f"XADD {keys.log} * payload '{{\"n\":2}}'\nEXEC\n"
    )
    ids = re.findall(r'"(\d+-\d+)"', out)
    # Then both are published, in order
    assert len(ids) == 2
    # And a batch with a command Redis refuses publishes none of it
    out = cli.lines(
        f"MULTI\nXADD {keys.log} * payload '{{\"n\":3}}'\nXADD {keys.log} * payload\nEXEC\n"
    )
    assert "EXECABORT" in out
    assert cli("XLEN", keys.log) == 2
    got = drain(broker.subscribe(queue_name, "billing", "py-1"), expected=3, timeout_s=1)
    assert [(m.id, m.payload) for m in got] == [(ids[0], {"n": 1}), (ids[1], {"n": 2})]


def test_cli_delayed_publish_is_promoted_by_the_script_never_early(
    cli: Cli, keys: Keys, broker: Broker, queue_name: str
) -> None:
    # Given a registered consumer and a delayed message ZADDed as PROTOCOL.md shows
    node = foreign(cli, keys)
    node.ensure()
    now = cli.now_ms()
    due = now + 300
    member = {
        "payload": '{"order":44}',
        "id": "5b1f0c2e9d0a4c1fa3b4c5d6e7f80912",
        "published_at": str(now),
        "due_at": str(due),
        "headers": '{"big":12345678901234567,"list":[]}',
    }
    cli("ZADD", keys.delayed, due, json.dumps(member, separators=(",", ":")))
    # When promote.lua runs before it is due: nothing moves, the due time is reported
    moved_d, moved_r, next_due, redis_now = node.promote()
    assert (moved_d, moved_r, next_due) == (0, 0, due) and redis_now < due
    assert cli("XLEN", keys.log) == 0
    # When it runs once Redis's clock reached the due time
    time.sleep(max(0, due - redis_now + 5) / 1000)
    moved_d, moved_r, next_due, redis_now = node.promote()
    assert (moved_d, moved_r, next_due) == (1, 0, -1) and redis_now >= due
    # Then the entry holds the member's fields byte for byte
    [(_, fields)] = cli("XRANGE", keys.log, "-", "+")
    assert pairs(fields) == member
    # And a Python instance receives it under its own id, with its due time
    [msg] = drain(broker.subscribe(queue_name, "billing", "py-1"), expected=1)
    assert (msg.id, msg.due_at_ms, msg.published_at_ms) == (member["id"], due, now)
    assert msg.headers == {"big": 12345678901234567, "list": []}
    assert cli("ZCARD", keys.delayed) == 0


def test_cli_delays_by_redis_clock_publish_delayed_and_publish_once(
    cli: Cli, keys: Keys, broker: Broker, queue_name: str
) -> None:
    # Given a registered consumer
    foreign(cli, keys).ensure()
    before = cli.now_ms()
    eta = before + 60_000
    # When one publish_delayed.lua call publishes now, after a 200 ms delay and at an eta
    reply = cli.script(
        "publish_delayed",
        [keys.meta, keys.delayed, keys.log],
        [
            1, 3,
            "0", 1, "payload", '{"n":1}',
            "+200", 3, "payload", '{"n":2}', "id", "d-1", "published_at", before,
            eta, 3, "payload", '{"n":3}', "id", "d-2", "published_at", before,
        ],
    )  # fmt: skip
    after = cli.now_ms()
    # Then the reply is the entry id of the first and the due times of the others
    entry, due, at = reply
    assert cli("XRANGE", keys.log, "-", "+")[0][0] == entry
    assert before + 200 <= due <= after + 200 and at == eta
    scored = pairs(cli("ZRANGE", keys.delayed, 0, -1, "WITHSCORES"))
    members = {json.loads(m)["id"]: (json.loads(m), int(score)) for m, score in scored.items()}
    assert members["d-1"] == (
        {"payload": '{"n":2}', "id": "d-1", "published_at": str(before), "due_at": str(due)},
        due,
    )
    assert members["d-2"][1] == eta
    # When publish_once.lua gets a relative delay, it makes the member itself
    once = [keys.meta, keys.log, keys.delayed, keys.sent("d-3")]
    fields = ["payload", '{"n":4}', "id", "d-3", "published_at", before]
    assert cli.script("publish_once", once, [1, 86400000, "+250", "", *fields]) == [1, ""]
    assert cli.script("publish_once", once, [1, 86400000, "+250", "", *fields]) == [0, ""]
    # Then a Python instance gets the immediate one and, once due, the delayed ones
    py = broker.subscribe(queue_name, "billing", "py-1")
    got = drain(py, expected=3, timeout_s=5)
    assert [m.id for m in got] == [entry, "d-1", "d-3"]
    for m in got[1:]:
        assert m.due_at_ms is not None and m.due_at_ms >= before + 200
    assert cli("ZCARD", keys.delayed) == 1  # the eta is a minute away


def test_cli_publish_once_publishes_each_id_once(
    cli: Cli, keys: Keys, broker: Broker, queue_name: str
) -> None:
    # Given two logical consumers
    assert foreign(cli, keys).ensure() == 1
    mail = ForeignConsumer(cli, keys, "mail", "node-m")
    assert mail.ensure() == 1
    mid = "5b1f0c2e9d0a4c1fa3b4c5d6e7f80912"
    once = [keys.meta, keys.log, keys.delayed, keys.sent(mid)]
    fields = ["payload", '{"order":46}', "id", mid]

    # When a relay publishes the same id twice with publish_once.lua
    first = cli.script("publish_once", once, [1, 86400000, 0, "", *fields])
    second = cli.script("publish_once", once, [1, 86400000, 0, "", *fields])
    # Then the second is a no-op reporting the first entry id
    assert first[0] == 1 and second == [0, first[1]]
    assert cli("XLEN", keys.log) == 1
    assert cli("GET", keys.sent(mid)) == first[1]
    assert 0 < cli("PTTL", keys.sent(mid)) <= 86400000

    # When a delayed message is published once (due time and member)
    did = "0f" * 16
    due = cli.now_ms() + 60_000
    member = json.dumps({"payload": "{}", "id": did, "published_at": "1", "due_at": str(due)})
    delayed_once = [keys.meta, keys.log, keys.delayed, keys.sent(did)]
    assert cli.script("publish_once", delayed_once, [1, 86400000, due, member]) == [1, ""]
    assert cli.script("publish_once", delayed_once, [1, 86400000, due, member]) == [0, ""]
    assert cli("ZSCORE", keys.delayed, member) == str(due)

    # When a message is delivered once to billing only (targeted replay)
    tid = "targeted-1"
    to_billing = [keys.meta, keys.direct("billing"), keys.delayed, keys.group_sent("billing", tid)]
    args = [1, 86400000, 0, "", "payload", '{"replay":true}', "id", tid]
    assert cli.script("publish_once", to_billing, args)[0] == 1
    assert cli.script("publish_once", to_billing, args)[0] == 0

    # Then billing (a Python instance) receives the message once and the targeted one once
    got = drain(broker.subscribe(queue_name, "billing", "py-1"), expected=3, timeout_s=1)
    assert sorted(m.id for m in got) == sorted([mid, tid])
    # And mail receives only the published one
    assert [(e[1], e[2]["id"]) for e in mail.fetch()] == [(first[1], mid)]


def test_cli_publish_batch_once_publishes_a_batch_once(
    cli: Cli, keys: Keys, broker: Broker, queue_name: str
) -> None:
    # Given a registered consumer and a batch (an immediate and a delayed message)
    foreign(cli, keys).ensure()
    marker = keys.batch("0c4f9a2be17d4e0a9b8c7d6e5f4a3b2c")
    args = [
        1, 600000, 2,
        "0", 2, "payload", '{"order":47}', "id", "m-47",
        "+100", 2, "payload", '{"order":48}', "id", "m-48",
    ]  # fmt: skip
    # When publish_batch_once.lua sends it twice (a retry after an unknown outcome)
    first = cli.script("publish_batch_once", [keys.meta, keys.log, keys.delayed, marker], args)
    second = cli.script("publish_batch_once", [keys.meta, keys.log, keys.delayed, marker], args)
    # Then the first publishes both (entry id, due time), the second nothing
    assert first[0] == 1 and first[1] == cli("XRANGE", keys.log, "-", "+")[0][0]
    assert second == [0]
    assert (cli("XLEN", keys.log), cli("ZCARD", keys.delayed)) == (1, 1)
    assert json.loads(cli("ZRANGE", keys.delayed, 0, -1)[0])["due_at"] == str(first[2])
    assert 0 < cli("PTTL", marker) <= 600000
    # And a Python instance receives each message once, under its own id
    got = drain(broker.subscribe(queue_name, "billing", "py-1"), expected=2, timeout_s=5)
    assert [m.id for m in got] == ["m-47", "m-48"]


# -- settling --------------------------------------------------------------------------------


def test_cli_ack_of_log_and_direct_entries(
    cli: Cli, keys: Keys, broker: Broker, queue_name: str
) -> None:
    # Given a message in the log and a re-driven one in billing's direct stream
    node = foreign(cli, keys)
    node.ensure()
    log_id = broker.publish(queue_name, {"n": 1})
    direct_id = cli.script(
        "redrive",
        [keys.meta, keys.dead("billing"), keys.direct("billing")],
        [1, "", "payload", "{}", "id", "x1"],
    )
    fetched = node.fetch()
    assert {(s, i) for s, i, _ in fetched} == {
        (keys.log, log_id),
        (keys.direct("billing"), direct_id),
    }
    # When ack.lua acknowledges both (m = 2 entries: the log one, then the direct one)
    entries = [("log", log_id, log_id), ("direct", direct_id, "x1")]
    acked = cli.script("ack", keys.settle("billing"), settle_args("billing", "n1", entries, {}))
    # Then both are settled and the direct entry is gone; a second ack finds nothing
    assert acked == 2
    assert cli("XLEN", keys.direct("billing")) == 0
    assert cli("XPENDING", keys.log, "billing")[0] == 0
    again = settle_args("billing", "n1", entries[:1], {})
    assert cli.script("ack", keys.settle("billing"), again) == 0


def test_cli_fail_retries_then_dead_letters_and_python_reads_and_redrives_it(
    cli: Cli, keys: Keys, broker: Broker, queue_name: str
) -> None:
    # Given a foreign instance with max_retries 1 and a message with every optional field
    node = foreign(cli, keys, max_retries=1)
    node.ensure()
    mid = "ext-42"
    cli(
        "XADD", keys.log, "*", "payload", '{"order":7}', "headers", '{"h":"1"}', "v", "1",
        "id", mid, "published_at", "1700000000000", "due_at", "1700000060000", "trace", "t-9",
    )  # fmt: skip

    # When its first delivery fails: a retry (fail.lua), promoted into the direct stream
    [(stream, entry_id, fields)] = node.fetch()
    assert node.fail(stream, entry_id, fields, "bad total") == "retry"
    assert cli("XPENDING", keys.log, "billing")[0] == 0
    [member] = cli("ZRANGE", keys.retry("billing"), 0, -1)
    retry = json.loads(member)
    assert (retry["attempts"], retry["id"], retry["trace"]) == ("1", mid, "t-9")
    moved = []
    for _ in range(100):  # bounded: the retry is due 20 ms after the failure
        moved = node.promote()[:2]
        if moved != [0, 0]:
            break
        time.sleep(0.01)
    assert moved == [0, 1]

    # When the second delivery (attempts 1 + delivery count 1 = 2 = max_retries + 1) fails
    [(stream, entry_id, fields)] = node.fetch()
    assert stream == keys.direct("billing")
    assert node.fail(stream, entry_id, fields, "bad total") == "dead"

    # Then it is a dead letter with the pinned fields, and nothing else holds it
    [(dead_id, dead)] = cli("XRANGE", keys.dead("billing"), "-", "+")
    dead = pairs(dead)
    assert set(dead) == {
        "payload", "headers", "v", "id", "published_at", "due_at", "trace", "attempts",
        "first_failed_at", "last_failed_at", "reason", "error_class", "error_message",
        "traceback", "group",
    }  # fmt: skip
    assert (dead["attempts"], dead["reason"], dead["id"]) == ("2", "failed", mid)
    assert cli("XLEN", keys.direct("billing")) == 0
    assert cli("ZCARD", keys.retry("billing")) == 0
    assert cli("XPENDING", keys.direct("billing"), "billing")[0] == 0
    # And the Python side reads it as a dead letter
    [letter] = broker.dead_letters.read(queue_name, "billing")
    assert (letter.entry_id, letter.id, letter.attempts, letter.reason) == (
        dead_id,
        mid,
        2,
        "failed",
    )
    assert (letter.error_class, letter.error_message) == ("TypeError", "bad total")

    # When the foreign client re-drives it (redrive.lua) with the carried fields only
    carried = {k: dead[k] for k in ("v", "payload", "headers", "id", "published_at", "due_at")}
    redrive_keys = [keys.meta, keys.dead("billing"), keys.direct("billing")]
    new_id = cli.script("redrive", redrive_keys, [1, dead_id, *flat(carried)])
    # Then a second re-drive of the same dead letter sends nothing
    assert cli.script("redrive", redrive_keys, [1, dead_id, *flat(carried)]) is None
    assert cli("XLEN", keys.dead("billing")) == 0
    # And a Python instance receives it as a first delivery with its identity and due time
    [msg] = drain(broker.subscribe(queue_name, "billing", "py-1"), expected=1)
    assert (msg.entry_id.decode(), msg.id, msg.attempts) == (new_id, mid, 1)
    assert (msg.published_at_ms, msg.due_at_ms) == (1700000000000, 1700000060000)


def test_python_dead_letters_have_the_fields_protocol_md_pins(
    cli: Cli, keys: Keys, broker: Broker, queue_name: str
) -> None:
    # Given a Python instance (max_retries 0) and messages published with redis-cli
    foreign(cli, keys).ensure()
    py = broker.subscribe(queue_name, "billing", "py-1", max_retries=0)
    failed = cli("XADD", keys.log, "*", "payload", "1", "v", "1", "trace", "t")
    rejected = cli("XADD", keys.log, "*", "payload", "2")
    no_payload = cli("XADD", keys.log, "*", "id", "m-1", "body", "\xff")
    bad_json = cli("XADD", keys.log, "*", "payload", "{bad", "id", "m-2")
    long_id = cli("XADD", keys.log, "*", "payload", "3", "id", "i" * 65)
    bad_time = cli("XADD", keys.log, "*", "payload", "4", "published_at", "x")
    not_strings = '{"payload":"5","id":"m-5","attempts":3}'  # a number: moved as `raw`
    cli("ZADD", keys.delayed, 1, not_strings)

    # When Python fetches: the undecodable ones become dead letters at once
    got = {m.entry_id.decode(): m for m in drain(py, expected=2, ack=False, timeout_s=1)}
    assert set(got) == {failed, rejected}
    # And the handler fails on one (a long message) and rejects the other
    long_text = "é" * 40_000
    try:
        raise ValueError(long_text)
    except ValueError as exc:
        assert py.fail(got[failed], exc).outcome is Outcome.DEAD
    assert py.reject(got[rejected], Reject("order deleted")).outcome is Outcome.DEAD

    # Then redis-cli reads dead letters with exactly the documented fields
    dead = {}
    for _, f in cli("XRANGE", keys.dead("billing"), "-", "+"):
        fields = pairs(f)
        dead[fields["id"]] = fields
    [promoted] = [i for i, f in dead.items() if json.loads(f.get("raw", "{}")).get("raw")]
    assert json.loads(dead[promoted]["raw"]) == {"raw": not_strings}
    handled = {
        *("id", "published_at", "attempts", "first_failed_at", "last_failed_at", "reason"),
        *("error_class", "error_message", "traceback", "group", "payload"),
    }
    f = dead[failed]
    assert set(f) == handled | {"v", "trace"}
    assert (f["reason"], f["error_class"], f["attempts"], f["group"]) == (
        "failed", "ValueError", "1", "billing",
    )  # fmt: skip
    assert f["published_at"] == failed.split("-")[0]
    assert f["first_failed_at"] == f["last_failed_at"]
    assert f["error_message"] == "é" * 32_000  # the first 32,000 characters
    assert len(f["traceback"]) == 32_000  # the last 32,000 characters: the end stays
    assert f["traceback"].endswith("é" * 100 + "\n") and "Traceback" not in f["traceback"]
    r = dead[rejected]
    assert set(r) == handled
    assert (r["reason"], r["error_class"], r["error_message"]) == (
        "rejected", "Reject", "order deleted",
    )  # fmt: skip
    undecodable = {"id", "raw", "attempts", "reason", "error_class", "error_message",
                   "traceback", "first_failed_at", "last_failed_at", "group"}  # fmt: skip
    expected = {
        no_payload: ("no 'payload' field", False),
        bad_json: ("payload is not valid JSON: ", True),
        long_id: ("field 'id' is longer than 64 characters", True),
        bad_time: ("field 'published_at' is not an integer", True),
        promoted: ("a delayed or retry member that is not a JSON object of strings", False),
    }
    for entry_id, (message, has_payload) in expected.items():
        u = dead[entry_id]  # the entry id, never the entry's own id field
        assert set(u) == undecodable | ({"payload"} if has_payload else set())
        assert (u["reason"], u["error_class"], u["attempts"], u["traceback"]) == (
            "undecodable", "UndecodableEntry", "1", "",
        )  # fmt: skip
        assert u["error_message"].startswith(message)
        assert u["first_failed_at"] == u["last_failed_at"]
    assert json.loads(dead[no_payload]["raw"]) == {"id": "m-1", "body": "ÿ"}
    assert dead[bad_json]["payload"] == "{bad"
    # And nothing is left pending
    assert cli("XPENDING", keys.log, "billing")[0] == 0


# -- leases: extend, reclaim, lease_expired, release, leave -----------------------------------


def test_cli_extend_and_reclaim_of_a_dead_instance(
    cli: Cli, keys: Keys, broker: Broker, queue_name: str
) -> None:
    # Given two foreign instances; node-1 fetched two messages and started the first
    node1, node2 = foreign(cli, keys, "node-1"), foreign(cli, keys, "node-2")
    node1.ensure()
    a = broker.publish(queue_name, {"n": "a"})
    b = broker.publish(queue_name, {"n": "b"})
    assert [e[1] for e in node1.fetch()] == [a, b]
    node1.start(keys.log, a)
    expiry = node1.heartbeat(15_000)
    assert cli("ZSCORE", keys.instances("billing"), "node-1") == str(expiry)
    assert 0 < expiry - cli.now_ms() <= 15_000
    extend_keys = [keys.log, keys.direct("billing")]

    # When the holder extends the lease of the running one; another instance cannot
    assert cli.script("extend", extend_keys, ["billing", "node-1", 1, a]) == []
    assert cli.script("extend", extend_keys, ["billing", "node-2", 1, a]) == [a]
    # When node-1 is alive, reclaim with a long visibility timeout takes nothing
    assert node2.reclaim(60_000)[2:] == [[], []]

    # When node-1's heartbeat expires (a stopping instance sends a negative ttl)
    node1.heartbeat(-1)
    reply = node2.reclaim(60_000)
    # Then node-2 holds both; only the started one counts a delivery (count 2), the
    # other keeps its count (1), and node-1 is gone (instances, group, running)
    log_entries = reply[2]
    assert [(e[0], e[2]) for e in log_entries] == [(a, 2), (b, 1)]
    assert json.loads(pairs(log_entries[0][1])["payload"]) == {"n": "a"}
    assert cli("ZSCORE", keys.instances("billing"), "node-1") is None
    assert cli("HGET", keys.running("billing"), "node-1") is None
    consumers = {pairs(c)["name"] for c in cli("XINFO", "CONSUMERS", keys.log, "billing")}
    assert consumers == {"node-2"}
    pending = cli("XPENDING", keys.log, "billing", "-", "+", 10)
    assert [(p[0], p[1], p[3]) for p in pending] == [(a, "node-2", 2), (b, "node-2", 1)]

    # When node-2 acks a, starts b and outruns a short visibility timeout
    assert cli("XACK", keys.log, "billing", a) == 1
    node2.start(keys.log, b)
    time.sleep(0.06)
    reply = foreign(cli, keys, "node-3").reclaim(50)
    # Then b goes to node-3 counting the started delivery; node-2's record is used up
    assert [(e[0], e[2]) for e in reply[2]] == [(b, 2)]
    assert reply[0] == "0-0"
    assert cli("HGET", keys.running("billing"), "node-2") == ""


def test_cli_lease_expired_and_release(
    cli: Cli, keys: Keys, broker: Broker, queue_name: str
) -> None:
    # Given a foreign consumer with max_retries 0; node-1 fetched a and c, started a and
    # crashed (a killed its process)
    node1 = foreign(cli, keys, "node-1", max_retries=0)
    node2 = foreign(cli, keys, "node-2", max_retries=0)
    node1.ensure()
    a = broker.publish(queue_name, {"n": "a"})
    c = broker.publish(queue_name, {"n": "c"})
    assert [e[1] for e in node1.fetch()] == [a, c]
    node1.start(keys.log, a)
    node1.heartbeat(-1)

    # When node-2 reclaims: a was started (count 2): deliveries made = 0 + 2 - 1 = 1,
    # not below max_retries + 1; c never started (count 1): a first delivery, handled
    reply = node2.reclaim(60_000)
    [(entry_id, fields, count), (other, _, other_count)] = reply[2]
    assert (entry_id, other, other_count) == (a, c, 1)
    assert cli("XACK", keys.log, "billing", c) == 1
    fields = pairs(fields)
    made = int(fields.get("attempts", "0")) + count - 1
    assert made >= node2.max_retries + 1
    now = cli.now_ms()
    dead = {
        **node2.next_delivery(entry_id, fields, made, now, failed=True),
        "reason": "lease_expired",
        "error_class": "LeaseExpired",
        "error_message": f"delivered {made} times without being acknowledged: the handler "
        "crashed or outran the visibility timeout each time",
        "traceback": "",
        "last_failed_at": now,
        "group": "billing",
    }
    assert node2.settle(keys.log, entry_id, "dead", 0, dead) == 1
    # Then the Python side reads a lease_expired dead letter with 1 attempt
    [letter] = broker.dead_letters.read(queue_name, "billing")
    assert (letter.id, letter.reason, letter.attempts) == (a, "lease_expired", 1)

    # When node-2 fetches another message and stops before starting it: release
    b = broker.publish(queue_name, {"n": "b"})
    [(stream, entry_id, fields)] = node2.fetch()
    assert entry_id == b
    envelope = node2.next_delivery(entry_id, fields, 0, cli.now_ms(), failed=False)
    assert node2.settle(stream, entry_id, "retry", 0, envelope) == 1
    assert "first_failed_at" not in envelope
    # Then any instance's next promotion hands it on; the release did not count a delivery
    [msg] = drain(broker.subscribe(queue_name, "billing", "py-1", max_retries=0), expected=1)
    assert (msg.id, msg.attempts, msg.first_failed_at_ms) == (b, 1, None)
    # And a settle by an instance that no longer holds an entry changes nothing
    assert node2.settle(stream, entry_id, "retry", 0, envelope) == 0


def test_cli_leave_removes_an_idle_instance_only(
    cli: Cli, keys: Keys, broker: Broker, queue_name: str
) -> None:
    # Given two instances alive; node-1 holds nothing, node-2 holds a message
    node1, node2 = foreign(cli, keys, "node-1"), foreign(cli, keys, "node-2")
    node1.ensure()
    assert node1.fetch() == []
    held = broker.publish(queue_name, {"n": 1})
    assert [e[1] for e in node2.fetch()] == [held]
    node2.start(keys.log, held)
    node1.heartbeat(15_000)
    node2.heartbeat(15_000)

    def leave(instance: str) -> None:  # as PROTOCOL.md's *Leave*
        cli("ZREM", keys.instances("billing"), instance)
        cli("HDEL", keys.running("billing"), instance)
        streams = (keys.log, keys.direct("billing"))
        if all(cli("XPENDING", s, "billing", "-", "+", 1, instance) == [] for s in streams):
            for s in streams:
                cli("XGROUP", "DELCONSUMER", s, "billing", instance)

    # When both leave
    leave("node-1")
    leave("node-2")
    # Then only the one that held nothing is removed from the group; the message stays
    consumers = {pairs(c)["name"] for c in cli("XINFO", "CONSUMERS", keys.log, "billing")}
    assert consumers == {"node-2"}
    assert cli("ZCARD", keys.instances("billing")) == 0
    assert cli("HLEN", keys.running("billing")) == 0
    assert cli("XPENDING", keys.log, "billing")[0] == 1


# -- retention and the archive ---------------------------------------------------------------


def test_cli_trim_and_archive_commit(cli: Cli, keys: Keys, broker: Broker, queue_name: str) -> None:
    # Given 5 messages; billing acked the first 3 and holds the 4th
    node = foreign(cli, keys)
    node.ensure()
    ids = [cli("XADD", keys.log, "*", "payload", str(i)) for i in range(5)]
    got = [e[1] for e in node.fetch(count=4)]
    assert got == ids[:4]
    assert cli("XACK", keys.log, "billing", *ids[:3]) == 3

    # When trim.lua runs with no replay window
    removed = cli.script("trim", [keys.log, keys.meta, keys.archives], ["", 0, 0, 0, 0, 1000])
    # Then the acked ones are removed, never the pending one
    assert removed == [3, 0]
    assert [e[0] for e in cli("XRANGE", keys.log, "-", "+")] == ids[3:]

    # When history is on, the archive holds retention: nothing goes before a commit
    assert cli("XACK", keys.log, "billing", ids[3]) == 1
    node.fetch()
    assert cli("XACK", keys.log, "billing", ids[4]) == 1
    history = [keys.log, keys.meta, keys.archives, keys.events]
    assert cli.script("trim", history, ["", 0, 0, 0, 0, 1000]) == [0, 0]
    # And a named archive registers from the earliest: after the last entry removed
    register = [keys.archives, keys.meta, keys.log]
    earliest = ["nightly", "messages", "earliest"]
    assert cli.script("archive_register", register, earliest) == [1, ids[2], ""]
    assert cli.script("trim", history, ["", 0, 0, 0, 0, 1000]) == [0, 0]
    # And archive_commit.lua moves its position forward only
    commit = ["nightly", "messages", ids[3]]
    assert cli.script("archive_commit", [keys.archives], commit) == ids[3]
    assert cli.script("archive_commit", [keys.archives], ["nightly", "messages", "1-0"]) == ids[3]
    with pytest.raises(CliError, match="invalid entry id"):
        cli.script("archive_commit", [keys.archives], ["nightly", "messages", "nope"])
    with pytest.raises(CliError, match="NOARCHIVE"):
        cli.script("archive_commit", [keys.archives], ["other", "messages", ids[4]])
    assert broker.archives.positions(queue_name, "nightly") == {"messages": ids[3]}
    assert cli.script("trim", history, ["", 0, 0, 0, 0, 1000]) == [1, 0]
    assert [e[0] for e in cli("XRANGE", keys.log, "-", "+")] == ids[4:]


# -- history layouts ---------------------------------------------------------------------------


def test_cli_history_layouts_write_their_events(
    cli: Cli, keys: Keys, broker: Broker, queue_name: str
) -> None:
    # Given a consumer and two messages fetched by a foreign instance
    node = foreign(cli, keys, max_retries=0)
    node.ensure()
    a = cli("XADD", keys.log, "*", "payload", "1")
    b = cli("XADD", keys.log, "*", "payload", "2", "id", "m-b")
    node.fetch()
    # When a is acknowledged with ack.lua's history layout
    handled = {"e": "handled", "g": "billing", "c": "node-1", "m": json.dumps([[a, 1, 12]])}
    acked = cli.script(
        "ack", keys.settle("billing"), settle_args("billing", "node-1", [("log", a, a)], handled)
    )
    assert acked == 1
    # And b is dead-lettered with fail.lua's history layout (its `dead` event first)
    now = cli.now_ms()
    event = {"e": "dead", "g": "billing", "c": "node-1", "m": '[["m-b",1,null]]',
             "error_class": "Reject", "error_message": "no", "reason": "rejected"}  # fmt: skip
    dead = {
        **{"payload": "2", "id": "m-b", "published_at": b.split("-")[0], "attempts": 1},
        **{"first_failed_at": now, "last_failed_at": now, "reason": "rejected"},
        **{"error_class": "Reject", "error_message": "no", "traceback": "", "group": "billing"},
    }
    entry = ("log", b, "m-b")
    args = settle_args("billing", "node-1", [entry], event, "dead", 0, *flat(dead))
    settled = cli.script("fail", keys.settle("billing"), args)
    assert settled == 1
    # And re-driven with redrive.lua's history layout
    [(dead_id, _)] = cli("XRANGE", keys.dead("billing"), "-", "+")
    redriven = {"e": "redriven", "g": "billing", "c": "", "m": '[["m-b",0,null]]'}
    new_id = cli.script(
        "redrive",
        [keys.meta, keys.dead("billing"), keys.direct("billing"), keys.events],
        [1, dead_id, len(redriven), *flat(redriven), "payload", "2", "id", "m-b"],
    )
    assert new_id is not None
    # Then the events stream holds one event per settle, in order
    events = [pairs(f) for _, f in cli("XRANGE", keys.events, "-", "+")]
    assert [(e["e"], json.loads(e["m"])) for e in events] == [
        ("handled", [[a, 1, 12]]),
        ("dead", [["m-b", 1, None]]),
        ("redriven", [["m-b", 0, None]]),
    ]
    assert events[1]["reason"] == "rejected"
    # And a Python instance with history on handles the re-driven message
    hist = Broker(broker.client, CoreConfig(poll_interval_ms=20, history=True))
    [msg] = drain(hist.subscribe(queue_name, "billing", "py-1"), expected=1)
    assert (msg.id, msg.attempts) == ("m-b", 1)
    assert [pairs(f)["e"] for _, f in cli("XRANGE", keys.events, "-", "+")][-1] == "handled"
    assert fetch_nothing(hist.subscribe(queue_name, "billing", "py-2")) == []


def test_cli_a_call_of_another_protocol_version_is_refused_with_a_clear_error(
    cli: Cli, keys: Keys
) -> None:
    register = [keys.meta, keys.log, keys.direct("billing")]
    # When a client of protocol 1 (no version first) registers a consumer
    with pytest.raises(CliError) as refused:
        cli.script("ensure_consumer", register, ["billing", "$"], version=())
    # Then the script says what it speaks and what it got, and did nothing
    assert str(refused.value) == (
        "REDISQ_PROTOCOL script ensure_consumer.lua speaks redisq/2, caller sent 'billing': "
        "load the scripts shipped with the redisq version your client implements"
    )
    with pytest.raises(CliError, match="caller sent 'redisq/3'"):
        cli.script("ensure_consumer", register, [1, "billing", "$"], version=["redisq/3"])
    assert cli("EXISTS", keys.log, keys.direct("billing")) == 0
    # And the same call with the version registers it
    assert cli.script("ensure_consumer", register, [1, "billing", "$"]) == 1


def test_parse_no_raw_reads_nested_replies() -> None:
    # The parser the foreign client uses, on redis-cli's own layout
    text = (
        '1) (integer) 1\n2) 1) (integer) 2\n   2) "a"\n3) (empty array)\n4) (nil)\n'
        '5) "x\\"y\\n\\xc3\\xa9"\n6) 1) 1) "q"\n      2) 1) "r"\n         2) "s"\n'
    )
    assert parse_no_raw(text) == [1, [2, "a"], [], None, 'x"y\né', [["q", ["r", "s"]]]]
    assert parse_no_raw('"1-0"\n') == "1-0"
    with pytest.raises(CliError):
        parse_no_raw("(error) NOSCRIPT No matching script.\n")
