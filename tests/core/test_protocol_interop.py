"""What a client written from PROTOCOL.md alone had to guess (issue 19), pinned: a foreign
client here uses raw redis-py commands and ``EVALSHA`` of the shipped ``.lua`` files read
from disk, nothing of our core API; our Python instances are the other party.

- integers of the envelope have one meaning, in Python's decoder and in the scripts;
- a byte order mark makes JSON text undecodable, wherever it is;
- ``raw`` keeps an entry's bytes exactly, from ``promote.lua``/``deliver_now.lua`` and
  through the undecodable dead letter;
- a ``retried`` event's ``next_due`` is the retry's due time by Redis's clock, written by
  the script; a ``redriven`` event's attempt is 0, from either side;
- an ordered consumer's instances, foreign and ours, keep one key's order together.

(Django tasks both ways: ``tests/tasks/test_protocol_interop.py``. The refusal of another
protocol version: ``test_protocol_version.py``.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

import redisq_django.core.scripts as shipped
from redisq_django.core import Broker, CoreConfig, Failure, Message
from tests.core.guarantee_helpers import drain

SCRIPTS_DIR = Path(shipped.__file__).parent
#: ARGV[1] of every call, as PROTOCOL.md spells it.
PROTOCOL = "redisq/2"
G = "billing"
#: A due time no test reaches (the year 2096).
FAR_FUTURE_MS = 4_000_000_000_000


@dataclass
class Foreign:
    """A client of another language: redis-py for the commands, the script files."""

    client: redis.Redis
    queue: str
    shas: dict[str, str] = field(default_factory=dict)

    def key(self, rest: str) -> str:
        return f"redisq:{{{self.queue}}}:{rest}"

    def g(self, rest: str, group: str = G) -> str:
        return self.key(f"g:{group}:{rest}")

    def script(self, name: str, keys: list[str], args: list[Any]) -> Any:
        if name not in self.shas:
            self.shas[name] = self.client.script_load((SCRIPTS_DIR / f"{name}.lua").read_text())
        return self.client.evalsha(self.shas[name], len(keys), *keys, PROTOCOL, *args)

    def now_ms(self) -> int:
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def ensure(self, group: str = G) -> None:
        self.script(
            "ensure_consumer",
            [self.key("meta"), self.key("log"), self.g("direct", group)],
            [1, group, "0-0"],
        )

    def settle_keys(self) -> list[str]:
        """The seven KEYS of every settling script (PROTOCOL.md, "The settle layout")."""
        held = [self.g("holders"), self.g("held_back")]
        return [self.key("log"), *[self.g(k) for k in ("direct", "retry", "dead")], *held,
                self.key("events")]  # fmt: skip

    def settle_args(
        self,
        instance: str,
        entries: list[tuple[str, Any, Any, Any]],
        event: list[Any],
        *own: Any,
        ordered: bool = False,
    ) -> list[Any]:
        """Their ARGV after the token: the head, the entries (stream, entry id, message
        id, ordering key), the event's pairs, then the script's own arguments."""
        prefix = self.g("waiting:") if ordered else ""
        flat = [item for e in entries for item in e]
        return [G, instance, prefix, len(entries), *flat, len(event) // 2, *event, *own]

    def events(self) -> list[dict[str, str]]:
        return [
            {k.decode(): v.decode() for k, v in f.items()}
            for _, f in self.client.xrange(self.key("events"))
        ]


@pytest.fixture
def foreign(redis_client: redis.Redis, queue_name: str) -> Foreign:
    return Foreign(redis_client, queue_name)


pytestmark = pytest.mark.core_config(poll_interval_ms=20, history=True)


def dead_letters(foreign: Foreign, group: str = G) -> dict[bytes, dict[bytes, bytes]]:
    """The dead stream of ``group``: {its `id` field: fields}."""
    return {f[b"id"]: f for _, f in foreign.client.xrange(foreign.g("dead", group))}


def consume(broker: Broker, queue: str) -> list[Message]:
    """What a Python instance of billing receives (and acks) until its input is empty;
    undecodable entries become dead letters on the way."""
    received: list[Message] = []
    with broker.subscribe(queue, G, "py-1") as py:
        for _ in range(20):  # bounded: the tests write a few entries each
            batch = py.fetch(count=100, block_ms=100)
            if not batch:
                break
            py.ack(batch)
            received += batch
    return received


# -- integers --------------------------------------------------------------------------------

#: Text of an integer field -> its value, or None: not an integer (the entry is undecodable).
INTEGERS: dict[str, int | None] = {
    "5": 5,
    "05": 5,
    "000000000000005": 5,  # 15 digits
    "999999999999999": 999_999_999_999_999,
    "0000000000000005": None,  # 16 digits
    "12345678901234567890": None,  # 20 digits
    "+5": None,
    "-5": None,
    " 5": None,
    "5 ": None,
    "5\n": None,
    "0x5": None,
    "5e0": None,
    "5.0": None,
    "5_0": None,
    "\uff15": None,  # a fullwidth five: a digit to Python's str.isdigit and int()
    "": None,
}


@pytest.mark.parametrize("text", INTEGERS)
def test_an_integer_has_one_meaning_in_python_and_in_the_scripts(
    foreign: Foreign, broker: Broker, queue_name: str, text: str
) -> None:
    expected = INTEGERS[text]
    foreign.ensure(G)
    foreign.ensure("lua")
    # Given an entry whose `attempts` is this text, written by the foreign client
    foreign.client.xadd(foreign.key("log"), {"payload": "1", "id": "m-1", "attempts": text})

    # When a Python instance of billing fetches it
    got = consume(broker, queue_name)
    # Then it is handled with that many earlier deliveries, or dead as undecodable
    if expected is None:
        assert got == []
        [dead] = foreign.client.xrange(foreign.g("dead"))
        assert dead[1][b"reason"] == b"undecodable"
        assert dead[1][b"error_message"] == (
            b"field 'attempts' is not an integer (1 to 15 digits 0-9)"
        )
    else:
        assert [m.attempts for m in got] == [expected + 1]

    # When reclaim.lua takes the same entry over in another consumer (history on): the
    # event counts the same earlier deliveries (none for a text that is no integer)
    log, direct = foreign.key("log"), foreign.g("direct", "lua")
    foreign.client.xreadgroup("lua", "dead-1", {log: ">"}, count=1)
    instances = foreign.g("instances", "lua")
    foreign.script("heartbeat", [instances], ["dead-1", -1])
    keys = [log, direct, instances, foreign.g("running", "lua"), foreign.g("leases", "lua")]
    reply = foreign.script(
        "reclaim", [*keys, foreign.key("events")], ["lua", "node-2", 60_000, 10, "", "0-0", "0-0"]
    )
    [(_, _, count)] = reply[2]
    assert count == 2  # a holder that records nothing in `running`: every claim counts
    [reclaimed] = [e for e in foreign.events() if e["e"] == "reclaimed"]
    assert reclaimed["m"] == f'[["m-1",{(expected or 0) + count},null]]'


@pytest.mark.parametrize("name", ["published_at", "first_failed_at", "due_at"])
@pytest.mark.parametrize("text", ["5", "05", "+5", " 5", "5e0", "0x5", "-5", ""])
def test_a_time_follows_the_same_rule(
    foreign: Foreign, broker: Broker, queue_name: str, name: str, text: str
) -> None:
    expected = INTEGERS[text]
    foreign.ensure()
    foreign.client.xadd(foreign.key("log"), {"payload": "1", "id": "m-1", name: text})
    got = consume(broker, queue_name)
    if expected is None:
        [dead] = dead_letters(foreign).values()
        assert dead[b"error_message"].decode() == (
            f"field '{name}' is not an integer (1 to 15 digits 0-9)"
        )
    else:
        [m] = got
        attr = {"published_at": "published_at_ms", "first_failed_at": "first_failed_at_ms"}
        assert getattr(m, attr.get(name, "due_at_ms")) == expected


# -- JSON text: no byte order mark -----------------------------------------------------------

BOM = b"\xef\xbb\xbf"


def test_a_byte_order_mark_makes_json_text_undecodable_wherever_it_is(
    foreign: Foreign, broker: Broker, queue_name: str
) -> None:
    foreign.ensure()
    log, delayed = foreign.key("log"), foreign.key("delayed")
    # Given a payload, headers, and delayed members starting with a byte order mark
    foreign.client.xadd(log, {"payload": BOM + b'{"a":1}', "id": "in-payload"})
    foreign.client.xadd(log, {"payload": b"1", "headers": BOM + b"{}", "id": "in-headers"})
    promoted = BOM + b'{"payload":"1","id":"promoted"}'
    moved_now = BOM + b'{"payload":"1","id":"moved-now"}'
    foreign.client.zadd(delayed, {promoted: 1, moved_now: FAR_FUTURE_MS})
    fine = foreign.client.xadd(log, {"payload": b' {"a":1} ', "id": "spaces"})  # JSON text
    # When one member is promoted when due and the other delivered now (deliver_now.lua)
    assert foreign.script("promote", [delayed, log], ["", 100])[0] == 1
    assert foreign.script("deliver_now", [delayed, log], [moved_now]) is not None
    # Then both members arrive unchanged as `raw`, as promote.lua moved the first
    raws = [f[b"raw"] for _, f in foreign.client.xrange(log) if b"raw" in f]
    assert raws == [promoted, moved_now]
    # And a Python instance handles only the valid message; the others are undecodable
    got = consume(broker, queue_name)
    assert [(m.entry_id.decode(), m.payload) for m in got] == [(fine.decode(), {"a": 1})]
    reasons = sorted(
        (json.loads(f[b"raw"]).get("id", ""), f[b"error_message"].decode())
        for f in dead_letters(foreign).values()
    )
    bom = "is not valid JSON: it starts with a byte order mark (U+FEFF), which JSON text may not"
    member = "a delayed or retry member that is not a JSON object of strings"
    assert reasons == [("", member), ("", member), ("in-headers", f"headers are {bom[3:]}"),
                       ("in-payload", f"payload {bom}")]  # fmt: skip


# -- raw: byte for byte ----------------------------------------------------------------------

#: Members that are not a JSON object of strings: each must reach its dead letter exactly.
ODD_MEMBERS = [
    b'{"payload":"1","attempts":3}',  # a number
    b'{"payload":"1","n":12345678901234567,"l":[],"o":{}}',  # values cjson would change
    b"\xff\xfe not JSON \x00 at all",
    b'{"payload":"\xff"',  # cut short, with a byte that is no UTF-8
    b"[1,2]",
    b"{}",
    b'"a string"',
    b'{"payload":"\\u00e9","k":true}',
]


def from_raw(raw: bytes) -> dict[bytes, bytes]:
    """The fields an undecodable dead letter's `raw` holds, bytes as they were (PROTOCOL.md:
    bytes that are not UTF-8 are `\\udcNN` escapes)."""
    return {
        k.encode("utf-8", "surrogateescape"): v.encode("utf-8", "surrogateescape")
        for k, v in json.loads(raw).items()
    }


def test_raw_keeps_every_byte_from_the_member_to_the_dead_letter(
    foreign: Foreign, broker: Broker, queue_name: str
) -> None:
    foreign.ensure()
    log, delayed = foreign.key("log"), foreign.key("delayed")
    # Given odd members, half promoted when due and half delivered now
    due = {m: i + 1 for i, m in enumerate(ODD_MEMBERS[::2])}
    later = {m: FAR_FUTURE_MS + i for i, m in enumerate(ODD_MEMBERS[1::2])}
    # And a JSON object of strings, one of which is not UTF-8: its fields, copied as bytes
    flat = b'{"payload":"\xff","id":"flat"}'
    foreign.client.zadd(delayed, {**due, **later, flat: 0})
    assert foreign.script("promote", [delayed, log], ["", 100])[0] == len(due) + 1
    for member in later:
        assert foreign.script("deliver_now", [delayed, log], [member]) is not None
    # And a stream entry whose field names and values are not UTF-8
    odd_entry = {b"id": b"odd", b"k\x80": b"\xc3(", b"payload": b"\xed\xa0\x80"}
    entry_id = foreign.client.xadd(log, odd_entry)
    # Then each member is the one field `raw`, byte for byte
    entries = foreign.client.xrange(log)
    assert sorted(f[b"raw"] for _, f in entries if b"raw" in f) == sorted(ODD_MEMBERS)
    assert {b"payload": b"\xff", b"id": b"flat"} in [f for _, f in entries]

    # When a Python instance reads them all: every one is an undecodable dead letter
    assert consume(broker, queue_name) == []
    dead = {f[b"id"]: f for _, f in foreign.client.xrange(foreign.g("dead"))}
    assert set(dead) == {e for e, _ in entries}
    # And its `raw` gives back exactly the fields the entry had
    for eid, fields in entries:
        assert from_raw(dead[eid][b"raw"]) == fields
    assert from_raw(dead[entry_id][b"raw"]) == odd_entry
    assert dead[entry_id][b"payload"] == b"\xed\xa0\x80"  # a payload field: kept as it was


# -- history: next_due by Redis's clock, the redriven attempt ------------------------------


def test_retried_events_carry_the_retry_due_time_by_redis_clock_from_both_sides(
    foreign: Foreign, broker: Broker, queue_name: str
) -> None:
    foreign.ensure()
    log, retry = foreign.key("log"), foreign.g("retry")
    a = foreign.client.xadd(log, {"payload": "1", "id": "from-foreign"}).decode()
    foreign.client.xadd(log, {"payload": "2", "id": "from-python"})
    with broker.subscribe(queue_name, G, "py-1") as py:
        [m_foreign, m_python] = py.fetch(count=2, block_ms=1000)
        assert m_foreign.entry_id.decode() == a  # held by py-1, settled by the foreign code
        # When the foreign client fails one (fail.lua, history layout, +1500 ms) with a
        # `retried` event without next_due, as PROTOCOL.md says
        event = ["e", "retried", "g", G, "c", "py-1", "m", '[["from-foreign",1,3]]',
                 "error_class", "TypeError", "error_message", "no"]  # fmt: skip
        before = foreign.now_ms()
        args = foreign.settle_args(
            "py-1", [("log", a, "from-foreign", "")], event,
            "retry", "+1500", "payload", "1", "id", "from-foreign", "attempts", 1,
        )  # fmt: skip
        settled = foreign.script("fail", foreign.settle_keys(), args)
        after = foreign.now_ms()
        assert settled == 1
        # And Python fails the other (Subscription.fail: no next_due passed)
        py.policy = py.policy.evolve(backoff_s=2.0, max_backoff_s=2.0)
        py.fail(m_python, Failure("ValueError", "bad"))
    # Then each retried event's next_due is its retry's score, by Redis's clock
    scores = {
        json.loads(member)["id"]: int(score)
        for member, score in foreign.client.zrange(retry, 0, -1, withscores=True)
    }
    retried = {json.loads(e["m"])[0][0]: e for e in foreign.events() if e["e"] == "retried"}
    assert set(retried) == {"from-foreign", "from-python"}
    for mid, e in retried.items():
        assert int(e["next_due"]) == scores[mid]
        assert list(e).count("next_due") == 1 and list(e)[-1] == "next_due"
    assert before + 1500 <= scores["from-foreign"] <= after + 1500
    assert scores["from-python"] >= before + 1000  # equal jitter: half the ceiling at least


def test_a_redriven_event_records_attempt_zero_from_both_sides(
    foreign: Foreign, broker: Broker, queue_name: str
) -> None:
    # Given two dead letters of billing (a foreign instance rejected them)
    foreign.ensure()
    log, dead, direct = foreign.key("log"), foreign.g("dead"), foreign.g("direct")
    for mid in ("a", "b"):
        eid = foreign.client.xadd(log, {"payload": "1", "id": mid}).decode()
        foreign.client.xreadgroup(G, "node-1", {log: ">"}, count=1)
        dead_letter = ["payload", "1", "id", mid, "published_at", 1, "attempts", 1,
                       "first_failed_at", 2, "last_failed_at", 2, "reason", "rejected",
                       "error_class", "Reject", "error_message", "no", "traceback", "",
                       "group", G]  # fmt: skip
        args = foreign.settle_args("node-1", [("log", eid, mid, "")], [], "dead", 0, *dead_letter)
        assert foreign.script("fail", foreign.settle_keys(), args) == 1
    dead_ids = {f[b"id"].decode(): i.decode() for i, f in foreign.client.xrange(dead)}
    # When the foreign client re-drives a (redrive.lua, history layout, attempt 0) and
    # Python re-drives b
    event = ["e", "redriven", "g", G, "c", "", "m", '[["a",0,null]]']
    carried = ["payload", "1", "id", "a", "published_at", 1]
    new = foreign.script(
        "redrive",
        [foreign.key("meta"), dead, direct, foreign.key("events")],
        [1, dead_ids["a"], 4, *event, *carried],
    )
    assert new is not None
    assert broker.dead_letters.redrive(queue_name, G, dead_ids["b"]) is not None
    # Then both redriven events say attempt 0: the re-driven entry carries no attempts
    redriven = [json.loads(e["m"]) for e in foreign.events() if e["e"] == "redriven"]
    assert redriven == [[["a", 0, None]], [["b", 0, None]]]
    # And a Python instance receives both as first deliveries
    with broker.subscribe(queue_name, G, "py-1") as py:
        got = drain(py, expected=2, timeout_s=2)
    assert sorted((m.id, m.attempts) for m in got) == [("a", 1), ("b", 1)]


def test_a_release_by_fail_lua_writes_no_next_due(foreign: Foreign, queue_name: str) -> None:
    foreign.ensure()
    log = foreign.key("log")
    eid = foreign.client.xadd(log, {"payload": "1", "id": "r"}).decode()
    foreign.client.xreadgroup(G, "node-1", {log: ">"}, count=1)
    event = ["e", "released", "g", G, "c", "node-1", "m", '[["r",0,null]]', "next_due", "7"]
    args = foreign.settle_args(
        "node-1", [("log", eid, "r", "")], event, "retry", 0, "payload", "1", "id", "r"
    )
    assert foreign.script("fail", foreign.settle_keys(), args) == 1
    [released] = foreign.events()
    assert released == {"e": "released", "g": G, "c": "node-1", "m": '[["r",0,null]]'}
    [(member, score)] = foreign.client.zrange(foreign.g("retry"), 0, -1, withscores=True)
    assert (json.loads(member), score) == ({"payload": "1", "id": "r"}, 0)


# -- ordered consumers (PROTOCOL.md, "Consume in key order") --------------------------------


def read_ordered(foreign: Foreign, instance: str) -> list[Any]:
    return foreign.script(
        "read_ordered",
        [foreign.key("log"), foreign.g("direct"), foreign.g("holders"), foreign.g("held_back")],
        [G, instance, 10, foreign.g("waiting:")],
    )


def test_a_foreign_instance_and_ours_share_the_order_of_a_key(
    foreign: Foreign, redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20))
    foreign.ensure()
    log = foreign.key("log")
    for n in range(3):  # published by the foreign client, as PROTOCOL.md's Publish says
        redis_client.xadd(log, {"payload": json.dumps({"n": n}), "key": "order-42"})

    # The foreign instance reads: the first message takes the key, the others wait
    got_log, got_direct, n_read, last_log, last_direct = read_ordered(foreign, "node-1")
    assert n_read == 3 and got_direct == []
    [(entry_id, fields)] = got_log
    assert json.loads(dict(zip(fields[::2], fields[1::2], strict=True))[b"payload"]) == {"n": 0}
    assert last_log == redis_client.xrevrange(log, count=1)[0][0] and last_direct == b"0-0"
    assert redis_client.hget(foreign.g("holders"), "order-42") == entry_id
    assert redis_client.llen(foreign.g("waiting:order-42")) == 2
    assert redis_client.get(foreign.g("held_back")) == b"2"

    # Our instance gets nothing of that key meanwhile
    with broker.subscribe(queue_name, G, "py-1", ordered=True) as py:
        assert py.fetch(count=10, block_ms=50) == []

        # The foreign acknowledgement hands the key on: ours receives message 1
        entry = ("log", entry_id, entry_id, "order-42")
        args = foreign.settle_args("node-1", [entry], [], ordered=True)
        acked = foreign.script("ack_ordered", foreign.settle_keys(), args)
        assert acked == 1
        [one] = py.fetch(count=10, block_ms=200)
        assert (one.key, one.payload) == ("order-42", {"n": 1})
        assert redis_client.hget(foreign.g("holders"), "order-42").decode() == one.id

        # Ours fails it into a dead letter: the key passes to message 2, which the
        # foreign instance reads from the consumer's direct stream
        py.policy = py.policy.evolve(max_retries=0)
        assert py.fail(one, RuntimeError("boom")).outcome.value == "dead"
    got_log, got_direct, *_ = read_ordered(foreign, "node-1")
    assert got_log == []
    [(_, fields)] = got_direct
    assert json.loads(dict(zip(fields[::2], fields[1::2], strict=True))[b"payload"]) == {"n": 2}
