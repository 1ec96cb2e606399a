"""Bulk retry of dead letters (issue 36, point 7): ``retry_matching`` — what the admin's
"Retry group" and "Retry all matching" and ``manage.py redisq dead retry`` call — on
10,000 dead-letter rows in SQLite (an on-disk file, Django's defaults), by a staff user
(so with the admin history written): rows of two plain consumers, and rows of a Django
task queue (whose FAILED results a retry makes READY again); each also with every Redis
reply held 1 ms (``slow_link``: a Redis across a data centre, where each round trip per
row costs a millisecond). Against a hand-written
floor in the same run: the plain rows read in chunks of 500, their envelopes sent in one
pipeline of ``XADD`` per chunk and marked with one ``UPDATE`` per chunk (no check that a
row is still dead, no admin history, no signal).

It runs in a process of its own (Django configured here, with ``django.contrib.admin``
for the history; the benchmark's own process has set up Django already), started by
``bench/run.py --only deadletters``, and prints its figures as JSON. Alone:
``.venv/bin/python bench/deadletters.py REDIS_URL TMPDIR REPS``; with ``--profile`` it
prints a cProfile of one bulk retry instead (top 30 by own time; ``--tasks``: of task
dead letters).
"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "bench"))

from slow_link import SlowLink  # noqa: E402

ROWS = 10_000
#: Rows per second a bulk retry must reach (issue 36, point 7).
TARGET = 1_000
#: The dead letters of plain consumers (half each) ...
QUEUE = "bulk"
CONSUMERS = ("billing", "email")
#: ... and those of a Django task queue ("jobs"): a retry makes their FAILED results
#: READY again (the tasks backend's receiver of ``dead_letters_retried``).
TASK_QUEUE = "tasks.jobs"
TASK_CONSUMER = "tasks"
#: The far rows: each reply held this long (a Redis across a data centre, not loopback).
FAR_MS = 1.0
#: A traceback 20 frames deep (2.6 kB), as a handler's failure leaves one in every row.
TRACEBACK = (
    "Traceback (most recent call last):\n"
    + "".join(
        f'  File "/srv/shop/billing/charges.py", line {100 + j}, in charge_{j}\n'
        "    result = gateway.charge(order, amount, idempotency_key=key)\n"
        for j in range(20)
    )
    + "ValueError: card declined for order 1041 (code 51)\n"
)


def configure(redis_url: str, tmp: Path) -> None:
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=[
            "django.contrib.admin",
            "django.contrib.contenttypes",
            "django.contrib.auth",
            "redisq_django",
        ],
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": str(tmp / "deadletters.sqlite3"),
            }
        },
        USE_TZ=True,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        REDISQ={"URL": redis_url},
        TASKS={"default": {"BACKEND": "redisq_django.tasks.RedisqBackend", "QUEUES": ["jobs"]}},
        LOGGING={"version": 1, "disable_existing_loggers": False},
    )
    django.setup()
    from django.core.management import call_command

    # The admin's checks want templates and middleware this process does not serve.
    call_command("migrate", verbosity=0, skip_checks=True)


def where(kind: str) -> tuple[str, tuple[str, ...]]:
    """(queue, consumers) of the rows of ``kind`` ("plain" or "tasks")."""
    return (QUEUE, CONSUMERS) if kind == "plain" else (TASK_QUEUE, (TASK_CONSUMER,))


def fill(client: Any, kind: str) -> None:
    """:data:`ROWS` dead-letter rows of ``kind`` as the sink stores them, in bulk; Redis
    empty but for the consumers' registrations (and, for tasks, their FAILED results)."""
    from django.contrib.admin.models import LogEntry

    from redisq_django.connection import get_broker
    from redisq_django.core.dead_entry import normalise_error
    from redisq_django.models import DeadLetter

    queue, consumers = where(kind)
    client.flushdb()
    broker = get_broker()
    broker._registered.clear()
    for consumer in consumers:
        broker.consumers.ensure(queue, consumer)
    DeadLetter.objects.all().delete()
    LogEntry.objects.all().delete()
    rows = []
    for i in range(ROWS):
        message_id = f"m-{i:06}"
        payload = json.dumps({"order": i, "customer": "c-0042", "total": "59.90"})
        rows.append(
            DeadLetter(
                queue=queue,
                consumer=consumers[i % len(consumers)],
                message_id=message_id,
                payload=payload,
                envelope={
                    "v": "2",
                    "id": message_id,
                    "payload": payload,
                    "headers": '{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-00"}',
                    "published_at": "1764600000000",
                },
                reason="failed",
                error_class="ValueError",
                error_message=f"card declined for order {i}",
                error_key=normalise_error(f"card declined for order {i}"),
                traceback=TRACEBACK,
                attempts=6,
            )
        )
    DeadLetter.objects.bulk_create(rows, batch_size=1000)
    if kind == "tasks":
        keys = broker.keys(queue)
        with client.pipeline(transaction=False) as pipe:
            for row in rows:
                pipe.hset(keys.task_result(row.message_id), "status", "FAILED")
            pipe.execute()


def delivered(client: Any, kind: str) -> int:
    from redisq_django.connection import get_broker

    queue, consumers = where(kind)
    keys = get_broker().keys(queue)
    return sum(int(client.xlen(keys.group(c).direct)) for c in consumers)


def ours(kind: str) -> float:
    """Seconds for ``retry_matching`` of every row of ``kind`` by a staff user."""
    from django.contrib.auth.models import User

    from redisq_django.deadletters import retry_matching
    from redisq_django.models import DeadLetter

    user = User.objects.get_or_create(username="ops", is_staff=True)[0]
    began = time.perf_counter()
    result = retry_matching(DeadLetter.objects.filter(queue=where(kind)[0]), user)
    elapsed = time.perf_counter() - began
    assert (result.done, result.skipped, result.remaining) == (ROWS, 0, 0), result
    return elapsed


def floor(client: Any) -> float:
    """Seconds for the hand-written floor on the plain rows: per chunk of 500, read,
    pipeline the XADDs, one UPDATE; what any bulk retry must do at least."""
    from django.db import transaction

    from redisq_django.connection import get_broker
    from redisq_django.models import DeadLetter

    keys = get_broker().keys(QUEUE)
    dead = DeadLetter.objects.filter(queue=QUEUE, status="dead").order_by("pk")
    began = time.perf_counter()
    last = 0
    while batch := list(dead.filter(pk__gt=last).values_list("pk", "consumer", "envelope")[:500]):
        with transaction.atomic():
            with client.pipeline(transaction=False) as pipe:
                for _pk, consumer, envelope in batch:
                    fields = [x for kv in envelope.items() for x in kv]
                    pipe.execute_command("XADD", keys.group(consumer).direct, "*", *fields)
                pipe.execute()
            DeadLetter.objects.filter(pk__in=[b[0] for b in batch]).update(status="retried")
        last = batch[-1][0]
    return time.perf_counter() - began


def profile(kind: str) -> str:
    out = io.StringIO()
    prof = cProfile.Profile()
    prof.enable()
    ours(kind)
    prof.disable()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(30)
    return out.getvalue()


def far(url: str, kind: str) -> float:
    """:func:`ours` with the Redis :data:`FAR_MS` away (``slow_link``): what a retry
    costs when each round trip does."""
    from django.test import override_settings

    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with SlowLink(port, FAR_MS) as slow_url, override_settings(REDISQ={"URL": slow_url}):
        return ours(kind)


def main() -> int:
    import redis

    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    url, tmp, reps = args[0], Path(args[1]), int(args[2])
    configure(url, tmp)
    client = redis.Redis.from_url(url)
    if "--profile" in sys.argv:
        kind = "tasks" if "--tasks" in sys.argv else "plain"
        fill(client, kind)
        print(profile(kind))
        return 0
    names = ["plain", "tasks", "plain_far", "tasks_far", "floor"]
    res: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps):
        for name in names if rep % 2 == 0 else reversed(names):
            kind = "plain" if name == "floor" else name.removesuffix("_far")
            fill(client, kind)
            if name == "floor":
                res[name].append(floor(client))
            else:
                res[name].append(far(url, kind) if name.endswith("_far") else ours(kind))
            assert delivered(client, kind) == ROWS, delivered(client, kind)
    print(json.dumps(res))
    return 0


def deadletter_rows(res: dict[str, list[float]], median: Any, row: Any) -> list[dict]:
    """Rows of the results table (``bench/run.py``): ours against the target (1,000
    rows/s); in the raw column the floor, or for a far row the same on loopback."""
    floor_rate = ROWS / median(res["floor"])
    rows = []
    for name, label, raw in (
        ("plain", "dead letters", "read + XADD pipeline + UPDATE per 500"),
        ("tasks", "task dead letters", "read + XADD pipeline + UPDATE per 500"),
        ("plain_far", f"dead letters, Redis {FAR_MS:g} ms away", "on loopback"),
        ("tasks_far", f"task dead letters, Redis {FAR_MS:g} ms away", "on loopback"),
    ):
        if name not in res:  # a run of an older bench/deadletters.py
            continue
        rate = ROWS / median(res[name])
        near = ROWS / median(res[name.removesuffix("_far")]) if raw == "on loopback" else None
        base = near if near is not None else floor_rate
        rows.append(
            row(
                f"bulk retry of {ROWS // 1000}k {label} (SQLite, admin history) vs {raw}",
                f"{rate:,.0f} rows/s",
                f"{base:,.0f} rows/s",
                f"{rate / base:.2f}x",
                f">= {TARGET:,} rows/s",
                "yes" if rate >= TARGET else "NO",
            )
        )
    return rows


if __name__ == "__main__":
    sys.exit(main())
