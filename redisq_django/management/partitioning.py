"""Changing a queue's number of partitions from the shell: ``manage.py redisq partitions
QUEUE K`` (``core/repartition.py``), refused unless the queue is drained."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import CommandError

from redisq_django.connection import get_broker
from redisq_django.core import bounds
from redisq_django.core.keys import validate_name
from redisq_django.management.console import Write


def add_partitions(sub: Any, common: list[argparse.ArgumentParser]) -> None:
    """The ``partitions`` sub-command's arguments."""
    p = sub.add_parser(
        "partitions",
        parents=common,
        help="show or change how many partitions a queue has (a drained queue only)",
        description="Without K: the number of partitions Redis records for QUEUE. With K: "
        "record K, refused unless the queue is drained (nothing unread after any "
        "consumer's position, nothing in flight, retrying, delayed, waiting for its "
        "ordering key or dead in Redis), and register every consumer on each new partition "
        "at its end. Stop the queue's publishers and workers first, and start them again "
        "with REDISQ['PARTITIONS'] giving the queue K: a process configured otherwise is "
        "refused.",
    )
    p.add_argument("queue")
    p.add_argument("count", nargs="?", type=bounds.argument("partitions_per_queue"), metavar="K")
    p.set_defaults(handler=partitions)


def partitions(opts: dict[str, Any], write: Write) -> None:
    """``redisq partitions``: see :func:`add_partitions`."""
    queue, count = opts["queue"], opts["count"]
    validate_name("queue", queue)
    broker = get_broker()
    if count is None:
        write(f"{queue}: {broker.partitions.recorded(queue)} partition(s) in Redis")
        return
    try:
        done = broker.partitions.change(queue, count)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    consumers = ", ".join(done.consumers) or "none"
    # Archives, when any: retention of each partition waits for them from its start.
    kept = f"; archives on every partition: {', '.join(done.archives)}" if done.archives else ""
    write(
        f"{queue}: {done.after} partition(s) recorded (were {done.before}); consumers on "
        f"every partition: {consumers}{kept}.\nRestart every process that publishes to or "
        f"consumes {queue!r} with REDISQ['PARTITIONS'] giving it {done.after}"
        f"{' (or leaving it out)' if done.after == 1 else ''}: a process configured "
        "otherwise is refused (PartitionsMismatch)."
    )
