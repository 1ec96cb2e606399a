"""The cost of ``atomic=True`` (issue 35, point 6), on SQLite and PostgreSQL, in the same
run: an in-process ``Worker`` draining no-op messages, one handler thread, the handler
atomic (a transaction and the inbox row's insert per message) vs not; and pruning a
million inbox rows.

It runs in a process of its own (Django configured here, with both databases: the
benchmark's own process has set up Django already), started by ``bench/run.py --only
inbox``, and prints its figures as JSON. Alone: ``.venv/bin/python bench/inbox.py
REDIS_URL TMPDIR REPS``.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DRAIN_N = 3_000
PRUNE_N = 1_000_000


def configure(redis_url: str, tmp: Path, pg: Any) -> None:
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "redisq_django"],
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": str(tmp / "inbox.sqlite3"),
            },
            "pg": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": "postgres",
                **pg.django_settings(),
            },
        },
        USE_TZ=True,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        REDISQ={"URL": redis_url},
        LOGGING={"version": 1, "disable_existing_loggers": False},
    )
    django.setup()
    from django.core.management import call_command

    for db in ("default", "pg"):
        call_command("migrate", database=db, verbosity=0)


def drain(client: Any, using: str | None, writes: str | None = None) -> float:
    """Seconds to drain :data:`DRAIN_N` messages; atomic on ``using`` when given; with
    ``writes`` (a database), the handler writes one row there (autocommit when not
    atomic: a commit per message either way), else it does nothing."""
    from redisq_django.connection import get_broker
    from redisq_django.consuming import inbox
    from redisq_django.core import ConsumerSpec
    from redisq_django.core.worker import Worker, WorkerOptions

    client.flushdb()
    broker = get_broker()
    broker._registered.clear()
    broker.consumers.ensure("inbox", "c")
    for start in range(0, DRAIN_N, 1000):
        broker.publish_many("inbox", range(start, min(DRAIN_N, start + 1000)))
    handler: Any = lambda m: None  # noqa: E731
    if writes is not None:
        from redisq_django.models import InboxEntry

        def handler(m: Any) -> None:  # a row of the handler's own: a second consumer's
            InboxEntry.objects.using(writes).create(queue="w", consumer="w", message_id=m.id)

    if using is not None:
        handler = inbox.atomic_handler(handler, queue="inbox", consumer="c", using=using)
    spec = ConsumerSpec("inbox", "c", handler, start="earliest")
    worker = Worker(broker, [spec], WorkerOptions(burst=True, stats_interval=0, block_ms=50))
    began = time.perf_counter()
    assert worker.run() == 0
    elapsed = time.perf_counter() - began
    assert worker.totals()["handled"] == DRAIN_N, worker.totals()
    return elapsed


def prune_million(using: str) -> tuple[float, float]:
    """(seconds to write, seconds to prune) :data:`PRUNE_N` rows older than the retention."""
    from redisq_django.consuming import inbox
    from redisq_django.models import InboxEntry

    rows = InboxEntry.objects.using(using)
    rows.all().delete()
    old = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    began = time.perf_counter()
    for start in range(0, PRUNE_N, 10_000):
        rows.bulk_create(
            InboxEntry(queue="inbox", consumer="c", message_id=f"m{i}", handled_at=old)
            for i in range(start, start + 10_000)
        )
    rows.update(handled_at=old)  # auto_now_add set now on insert
    written = time.perf_counter() - began
    began = time.perf_counter()
    deleted = 0
    for _ in range(10_000):
        n = inbox.prune(using)
        deleted += n
        if n < inbox.PRUNE_BATCH * inbox.PRUNE_ROUNDS:
            break
    pruned = time.perf_counter() - began
    assert deleted == PRUNE_N, deleted
    return written, pruned


def main() -> int:
    import redis

    from tests.support.postgres_server import PostgresServer, find_pg_bin

    url, tmp, reps = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    bin_dir = find_pg_bin()
    assert bin_dir is not None, "no PostgreSQL binaries (make test installs them)"
    pg = PostgresServer(bin_dir)
    pg.start()
    try:
        configure(url, tmp, pg)
        client = redis.Redis.from_url(url)
        res: dict[str, list[float]] = {}
        variants = [
            ("plain", None, None),
            ("sqlite", "default", None),
            ("pg", "pg", None),
            ("write_plain_sqlite", None, "default"),
            ("write_atomic_sqlite", "default", "default"),
            ("write_plain_pg", None, "pg"),
            ("write_atomic_pg", "pg", "pg"),
        ]
        for rep in range(reps):
            for name, using, writes in variants if rep % 2 == 0 else reversed(variants):
                res.setdefault(f"drain_{name}", []).append(drain(client, using, writes))
        for using in ("default", "pg"):
            written, pruned = prune_million(using)
            res[f"prune_{using}"] = [pruned]
            res[f"write_{using}"] = [written]
        print(json.dumps(res))
    finally:
        from django.db import connections

        connections.close_all()
        pg.stop()
    return 0


def inbox_rows(res: dict[str, list[float]], median: Any, row: Any, ratio_row: Any) -> list[dict]:
    """Rows of the results table (``bench/run.py``)."""
    rows = []
    for name, label in (("sqlite", "SQLite"), ("pg", "PostgreSQL")):
        rows.append(
            ratio_row(
                f"drain {DRAIN_N // 1000}k no-op, c=1, atomic=True on {label} vs not atomic",
                DRAIN_N / median(res[f"drain_{name}"]),
                DRAIN_N / median(res["drain_plain"]),
                "msg/s",
                None,
            )
        )
    for db, label in (("sqlite", "SQLite"), ("pg", "PostgreSQL")):
        rows.append(
            ratio_row(
                f"drain {DRAIN_N // 1000}k writing a row, c=1, atomic=True on {label} vs "
                "the same row in autocommit",
                DRAIN_N / median(res[f"drain_write_atomic_{db}"]),
                DRAIN_N / median(res[f"drain_write_plain_{db}"]),
                "msg/s",
                None,
            )
        )
    for using, label in (("default", "SQLite"), ("pg", "PostgreSQL")):
        seconds = res[f"prune_{using}"][0]
        rows.append(
            row(
                f"prune 1M inbox rows on {label} (1,000 per statement)",
                f"{seconds:.1f} s",
                "",
                f"{PRUNE_N / seconds:,.0f} rows/s",
                "(info)",
                "",
            )
        )
    return rows


if __name__ == "__main__":
    sys.exit(main())
