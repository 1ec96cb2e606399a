"""Every settle our code sends has the one settle layout (PROTOCOL.md, "The settle
layout"), whichever caller sends it: a subscription's ack, fail, dead letter, release
and undecodable entry, an ordered consumer's, the worker's ack pipe (prepacked or not)
and the task store. Watched with MONITOR on a real Redis, as the server receives them."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis

from redisq_django.core import Broker, CoreConfig, DeadReason
from redisq_django.core.clock import now_ms
from redisq_django.core.scripts.assembly import assembled, sha1
from redisq_django.core.worker.acks import AckPipe

SETTLING = {sha1(name): name for name in ("ack", "ack_ordered", "fail", "task_settle")}
#: One argument of a MONITOR line: a quoted string, with backslash escapes.
ARGUMENT = re.compile(r'"((?:[^"\\]|\\.)*)"')
END = "end-of-settles"


@contextmanager
def monitoring(client: redis.Redis) -> Iterator[list[list[str]]]:
    """The commands Redis receives meanwhile (from clients, not from scripts), each as its
    arguments."""
    seen: list[list[str]] = []
    monitor = client.monitor()
    with monitor:
        lines: list[str] = []

        def read() -> None:
            for _ in range(100_000):  # bounded: the test sends a few hundred commands
                line = monitor.connection.read_response()
                text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
                if "[lua]" not in text and "lua]" not in text.split('"', 1)[0]:
                    lines.append(text)
                if f'"ECHO" "{END}"' in text or f'"echo" "{END}"' in text:
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            yield seen
        finally:
            client.echo(END)
            reader.join(timeout=10)
        assert not reader.is_alive(), "MONITOR never showed the end marker"
        seen += [ARGUMENT.findall(text) for text in lines]


def check_layout(name: str, keys: list[str], argv: list[str]) -> tuple[str, str]:
    """Fail unless ``keys``/``argv`` are the settle layout; ``(script, mode)``."""
    assert argv[0] == "redisq/2"
    group, prefix, m = argv[1], argv[3], int(argv[4])
    tag = keys[0].removesuffix(":log")
    layout = [f"{tag}:log", *[f"{tag}:g:{group}:{k}" for k in SETTLED], f"{tag}:events"]
    assert keys[:7] == layout
    assert len(keys) == (10 if name == "task_settle" else 7)
    entries = argv[5 : 5 + 4 * m]
    assert entries[::4] and set(entries[::4]) <= {"log", "direct"}
    k = int(argv[5 + 4 * m])
    event = argv[6 + 4 * m : 6 + 4 * m + 2 * k]
    assert k == 0 or event[:2] == ["e", event[1]]
    own = argv[6 + 4 * m + 2 * k :]
    if name in ("ack", "ack_ordered"):
        assert own == []
        assert (prefix != "") == (name == "ack_ordered")
        if prefix:
            assert prefix == f"{tag}:g:{group}:waiting:"
        return name, "ack"
    assert m == 1
    assert own[0] in (("ack", "retry", "dead") if name == "task_settle" else ("retry", "dead"))
    return name, own[0]


SETTLED = ("direct", "retry", "dead", "holders", "held_back")


def settle_every_way(broker: Broker, queue: str, history: bool) -> None:
    """Each caller of a settling script, once."""
    broker.consumers.ensure(queue, "billing")
    broker.publish_many(queue, [{"n": n} for n in range(5)])
    broker.client.xadd(broker.keys(queue).log, {"junk": "1"})  # undecodable: a dead letter
    with broker.subscribe(queue, "billing", "i1") as sub:
        a, b, c, d, e = sub.fetch(count=10, block_ms=100)
        sub.ack([a])
        sub.fail(b, ValueError("retry me"))
        sub.dead_letter(c, ValueError("reject me"), DeadReason.REJECTED)
        assert sub.release([d]) == 1  # a retry due now: the direct stream's next
        pipe = AckPipe(sub, lambda acked: None)
        pipe.add(e)
        pipe.send()  # prepacked: one log entry
        again = []
        for _ in range(50):  # bounded: the release is promoted within a poll or two
            again = sub.fetch(count=10, block_ms=100)
            if again:
                break
        assert [m.id for m in again] == [d.id]
        pipe.add(again[0])
        pipe.flush()  # prepacked: one direct entry
        pipe.close()
        [f, g] = publish_and_fetch(broker, sub, queue, 2)
        pipe = AckPipe(sub, lambda acked: None)
        pipe.add(f)
        pipe.add(g)
        pipe.flush()  # two at once: built by Settling.ack, not prepacked
        pipe.close()
        [t] = publish_and_fetch(broker, sub, queue, 1)
        assert broker.task_results.succeed(
            t, {"status": "SUCCESSFUL"}, expire_at_ms=now_ms() + 60_000
        )
    ordered = f"{queue}.ordered"
    broker.consumers.ensure(ordered, "billing")
    broker.publish_many(ordered, [{"n": n} for n in range(2)], key="k")
    broker.publish(ordered, {"n": 9}, key="other")
    with broker.subscribe(ordered, "billing", "i1", ordered=True) as sub:
        first, other = sub.fetch(count=10, block_ms=100)
        sub.ack([first])  # hands key k on
        sub.dead_letter(other, ValueError("no"), DeadReason.REJECTED)


def publish_and_fetch(broker: Broker, sub: Any, queue: str, n: int) -> list[Any]:
    broker.publish_many(queue, [{"more": i} for i in range(n)])
    got: list[Any] = []
    for _ in range(50):  # bounded
        got += sub.fetch(count=10, block_ms=100)
        if len(got) >= n:
            break
    assert len(got) == n
    return got


@pytest.mark.parametrize("history", [False, True])
def test_every_settle_our_code_sends_has_the_one_layout(
    redis_client: redis.Redis, queue_name: str, history: bool
) -> None:
    broker = Broker(redis_client, CoreConfig(history=history, poll_interval_ms=20))
    for name in SETTLING.values():  # loaded: no call is refused (NOSCRIPT) and sent again
        redis_client.script_load(assembled(name))
    # Given every caller of a settling script, with history on and off
    with monitoring(redis_client) as seen:
        settle_every_way(broker, queue_name, history)
    # When the commands Redis received are read: every settling script's call
    settles = []
    for args in seen:
        if args and args[0].upper() == "EVALSHA" and args[1] in SETTLING:
            numkeys = int(args[2])
            keys, argv = args[3 : 3 + numkeys], args[3 + numkeys :]
            settles.append(check_layout(SETTLING[args[1]], keys, argv))
    # Then each has the layout, and every kind of settle was seen
    assert set(settles) >= {
        ("ack", "ack"),
        ("ack_ordered", "ack"),
        ("fail", "retry"),
        ("fail", "dead"),
        ("task_settle", "ack"),
    }
    # And the acks of a consumer that is not ordered went through ack.lua as often as
    # a script was needed: history on, every ack; off, those with a direct entry
    acks = settles.count(("ack", "ack"))
    assert acks == (4 if history else 1)


@pytest.mark.parametrize("history", [False, True])
def test_an_ordered_ack_of_entries_settled_elsewhere_acks_the_others(
    redis_client: redis.Redis, queue_name: str, history: bool
) -> None:
    # Given an ordered consumer's two messages of two keys, the first acknowledged
    # already (another instance's settle, say)
    broker = Broker(redis_client, CoreConfig(history=history, poll_interval_ms=20))
    broker.consumers.ensure(queue_name, "billing")
    broker.publish(queue_name, {"n": 1}, key="a")
    broker.publish(queue_name, {"n": 2}, key="b")
    with broker.subscribe(queue_name, "billing", "i1", ordered=True) as sub:
        first, second = sub.fetch(count=10, block_ms=100)
        assert sub.ack([first]) == 1
        # When both are acknowledged in one call
        acked = sub.ack([first, second])
    # Then the other one is, and only its record is in the event (history on)
    assert acked == 1
    assert redis_client.xpending(broker.keys(queue_name).log, "billing")["pending"] == 0
    if history:
        handled = [f for _, f in redis_client.xrange(broker.keys(queue_name).events)]
        assert [json.loads(f[b"m"])[0][0] for f in handled] == [first.id, second.id]
