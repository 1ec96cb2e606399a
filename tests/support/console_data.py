"""The state an operator meets during an incident, built through the real broker: a
stalled consumer with a backlog, a paused queue, an instance alive, dead letters with
long payloads and tracebacks, one that died twice, and an undecodable one."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from redisq_django.core.dead_entry import Failure, normalise_error
from redisq_django.deadletters.sinking import sink
from redisq_django.models import Consumer, DeadLetter, Queue


def _raise_deep(depth: int, text: str) -> None:
    if depth:
        _raise_deep(depth - 1, text)
    raise ValueError(text)


def failure(text: str, depth: int = 0) -> BaseException:
    """An exception with a real traceback ``depth`` frames deep."""
    try:
        _raise_deep(depth, text)
    except ValueError as exc:
        return exc
    raise AssertionError("unreachable")


def kill(
    broker: Any, queue: str, consumer: str, payload: Any, error: BaseException | Failure
) -> str:
    """Publish one message and reject it in ``consumer``: a dead letter in Redis."""
    message_id = broker.publish(queue, payload)
    with broker.subscribe(queue, consumer) as sub:
        messages = sub.fetch(count=100, block_ms=500)
        (message,) = [m for m in messages if m.id == message_id]
        sub.ack([m for m in messages if m.id != message_id])
        sub.reject(message, error)
    return str(message_id)


def many_dead(broker: Any, queue: str, consumer: str, n: int, **row: Any) -> list[str]:
    """``n`` dead-letter rows of ``consumer`` as the sink stores them (written in bulk:
    dying 5,000 times through a worker would take minutes); returns their message ids."""
    broker.consumers.ensure(queue, consumer)
    ids = [f"{consumer}-{i:05}" for i in range(n)]
    DeadLetter.objects.bulk_create(
        DeadLetter(
            queue=queue,
            consumer=consumer,
            message_id=message_id,
            payload=json.dumps({"n": i}),
            envelope={"id": message_id, "payload": json.dumps({"n": i}), "published_at": "1"},
            reason="failed",
            error_class=row.get("error_class", "ValueError"),
            error_message=f"card declined for order {i}",
            error_key=normalise_error(f"card declined for order {i}"),
            attempts=6,
        )
        for i, message_id in enumerate(ids)
    )
    return ids


def undecodable(broker: Any, queue: str, consumer: str, message_id: str) -> None:
    """A dead letter another client left: not a valid envelope."""
    broker.client.xadd(
        broker.keys(queue).group(consumer).dead,
        {
            b"id": message_id.encode(),
            b"raw": b"{'payload': b'\\xff\\xfe not json'}",
            b"reason": b"undecodable",
            b"error_class": b"UndecodableEntry",
            b"error_message": b"the payload is not valid JSON (byte 0xff at position 0)",
            b"attempts": b"1",
            b"last_failed_at": b"1700000000500",
            b"group": consumer.encode(),
        },
    )


@dataclass
class Incident:
    """What :func:`incident` built."""

    queue: str
    paused_queue: str
    dead: dict[str, str] = field(default_factory=dict)  # label -> message id

    def row(self, label: str) -> DeadLetter:
        return DeadLetter.objects.get(message_id=self.dead[label])


def incident(broker: Any, queue: str = "shop", *, backlog: int = 12) -> Incident:
    """Queue ``queue`` with consumers billing (a backlog, no instance alive: stalled),
    email (an instance alive, paused) and audit-trail-with-a-long-name; queue
    ``<queue>.audit`` paused; dead letters of billing: three card errors differing by
    numbers (one group), a long one, one that died twice, an undecodable one."""
    paused_queue = f"{queue}.audit"
    q = Queue.objects.create(name=queue)
    audit = Queue.objects.create(name=paused_queue, paused=True)
    for name in ("billing", "email", "audit-trail-with-a-rather-long-name"):
        Consumer.objects.create(
            queue=q, name=name, handler=f"shop.consumers.{name}", paused=name == "email"
        )
        broker.consumers.ensure(queue, name)
    Consumer.objects.create(queue=audit, name="archive", handler="shop.consumers.archive")
    broker.consumers.ensure(paused_queue, "archive")
    made = Incident(queue, paused_queue)
    for n, order in enumerate((1041, 2093, 3337)):
        made.dead[f"card-{n}"] = kill(
            broker,
            queue,
            "billing",
            {"order": order, "sku": f"needle-{order}"},
            failure(f"card declined for order {order} (code 51)"),
        )
    long_payload = {
        "order": 77,
        "lines": [{"sku": f"item-{i}", "note": "x" * 120} for i in range(40)],
    }
    made.dead["long"] = kill(
        broker,
        queue,
        "billing",
        long_payload,
        failure("tax service answered 503 " + "with a very long explanation " * 20, depth=30),
    )
    made.dead["twice"] = kill(broker, queue, "billing", {"order": 88}, KeyError("customer"))
    sink(queue, "billing")
    made.dead["undecodable"] = "garbage-1"
    undecodable(broker, queue, "billing", "garbage-1")
    sink(queue, "billing")
    # The twice-dead one: retried, then it died again
    from redisq_django import deadletters

    deadletters.retry([made.row("twice")])
    with broker.subscribe(queue, "billing") as sub:
        (again,) = sub.fetch(count=1, block_ms=500)
        sub.reject(again, KeyError("customer"))
    sink(queue, "billing")
    # The backlog nobody works on (billing), and an instance alive for email
    broker.publish_many(queue, [{"order": 5000 + i} for i in range(backlog)])
    with broker.subscribe(queue, "email") as sub:
        sub.heartbeat(60_000)
        sub.ack(sub.fetch(count=1000, block_ms=500))
    broker.publish(queue, {"later": True}, delay=3600)
    return made
