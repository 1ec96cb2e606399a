"""Benchmark of redisq_django against raw redis-py, on one private local redis-server.

Run with ``make bench`` (or ``.venv/bin/python bench/run.py``). Prints a table
(measurement, ours, raw, ratio, target, met?) and writes it with the machine details
to ``bench/out/results.md`` and ``bench/out/results.json``. Nothing is asserted: the
figures are noisy (shared CPUs); each one is the median of ``--reps`` repetitions.

What is measured (see bench/RESULTS.md for the discussion):

* publish: ``Broker.publish`` vs ``execute_command("XADD", key, "*", "payload", json)``;
  ``Broker.publish_many`` (100) vs a ``pipeline(transaction=False)`` of 100 XADDs.
  Both sides JSON-encode the same payload on every call.
* publish_on_commit: in this process (Django set up with ``benchproject.settings``, its
  own on-disk SQLite file in the temporary directory), ``transaction.atomic()`` around
  100 ``publish_on_commit`` calls (sent after the commit in one round trip) vs the same
  ``atomic()`` encoding 100 payloads, then a ``pipeline(transaction=False)`` of 100
  XADDs after it; diagnostic: raw with a uuid4 id field per message, as ours carries;
  the same with one ORM INSERT in the transaction on both sides; and
  ``REDISQ["OUTBOX"]`` True vs False (``override_settings``).
* drain: 20,000 no-op messages handled by one ``manage.py runconsumer bench --burst``
  subprocess (concurrency 1 and 8), timed from spawn to exit and, inside the handler,
  from the first handled message to the last; vs an in-process raw
  ``XREADGROUP COUNT 100`` + ``XACK`` loop over the same entries; and with
  ``--processes 2`` (two worker processes under the supervisor) vs 1, in the same rep,
  also on 4,000 messages whose handler burns 0.5 ms of CPU each.
* observe: the same drain (c=1, first->last) with ``--metrics-port 0`` vs without, and
  with ``REDISQ["TRACING"]`` on vs off, once with no OpenTelemetry SDK configured (no-op
  spans), once with the SDK recording every span (a batch processor, an exporter that
  drops them) and once with the SDK keeping 1 % of traces (``ParentBasedTraceIdRatio``);
  each "on" run back to back with its "off" run. The same again in this process (an
  in-process ``Worker``), as CPU seconds: less sensitive to other jobs.
* trends: the same drain with the per-minute trend counters on (the default) vs off
  (``REDISQ["TRENDS"]``), back to back; the same in this process as CPU seconds; and
  ``Broker.publish`` with them on vs off (the counter rides in the publish's write).
* latency: a ``runconsumer bench_latency`` subprocess (not an in-process Worker) while
  this process publishes at 200 msg/s; the handler records ``time.time() -
  message.published_at``.
* delayed lateness: messages published with delay 0.1-1 s; the handler records
  ``time.time() - message.due_at``.
* ordered: ordered consumers vs unordered ones on the same messages (``bench/ordered.py``).
* replicas: an ordered consumer's reads waiting for a replica (``wait_replicas``) vs not,
  on a primary with one replica of its own (``bench/replicas.py``).
* partitions: one queue of K = 1, 2, 4, 8 partitions on a 3-master cluster of its own:
  commands per message, each master's share, drain throughput (``bench/partitions.py``).
* inbox: ``atomic=True`` consumers' drain on SQLite and PostgreSQL vs not atomic, and
  pruning a million inbox rows (``bench/inbox.py``, in a process of its own).
* deadletters: a bulk retry of 10,000 dead-letter rows (SQLite, the admin history
  written) vs a hand-written read + XADD pipeline + UPDATE per chunk
  (``bench/deadletters.py``, in a process of its own).
* flow: the cost of a rate limit and a concurrency limit far above the drain rate vs no
  limit, and a rate limit's precision at 10, 100 and 1,000/s (``bench/flow.py``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path[:0] = [str(REPO), str(BENCH_DIR)]

import redis  # noqa: E402
from deadletters import deadletter_rows  # noqa: E402
from flow import bench_flow, flow_rows  # noqa: E402
from inbox import inbox_rows  # noqa: E402
from ordered import bench_ordered, ordered_rows  # noqa: E402
from partitions import bench_partitions, partition_rows  # noqa: E402
from replicas import bench_replicas, replica_rows  # noqa: E402

from redisq_django.core import Broker  # noqa: E402
from tests.support.redis_server import RedisServer, find_redis_server  # noqa: E402

OUT = BENCH_DIR / "out"
PAYLOAD = {
    "order": 123456,
    "customer": "c-0042",
    "items": [{"sku": "ABC-1", "qty": 2}, {"sku": "XYZ-9", "qty": 1}],
    "total": "59.90",
}
DRAIN_N = 20_000
#: Messages of the CPU-bound drain (0.5 ms of CPU each: 2 s of handling in all).
CPU_DRAIN_N = 4_000
RATE = 200.0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    k = min(len(s) - 1, max(0, round(p / 100.0 * (len(s) - 1))))
    return s[k]


# ---------------------------------------------------------------------------------------
# Environment
# ---------------------------------------------------------------------------------------


def redis_binary() -> str:
    env = os.environ.get("REDISQ_TEST_REDIS_SERVER")
    stamp = REPO / ".venv" / ".redis-server"
    if not env and stamp.exists():
        os.environ["REDISQ_TEST_REDIS_SERVER"] = stamp.read_text().strip()
    found = find_redis_server()
    if not found:
        sys.exit("bench: no redis-server (set REDISQ_TEST_REDIS_SERVER or run `make redis`)")
    return found


def machine(client: redis.Redis) -> dict[str, Any]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import django

    info = client.info("server")
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "redis": info["redis_version"],
        "redis_hz": client.config_get("hz").get("hz"),
        "redis_py": redis.__version__,
        "hiredis": _hiredis(),
        "django": django.__version__,
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "platform": platform.platform(),
    }


def _hiredis() -> str:
    try:
        import hiredis

        return str(hiredis.__version__)
    except ImportError:
        return "no"


class DjangoEnv:
    """Environment for ``python -m django ... --settings benchproject.settings``."""

    def __init__(self, url: str, tmp: Path) -> None:
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join(
            [str(BENCH_DIR), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        self.env["BENCH_REDIS_URL"] = url
        self.env["BENCH_DB"] = str(tmp / "bench.sqlite3")
        self.env.pop("DJANGO_SETTINGS_MODULE", None)

    def cmd(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "django", *args, "--settings", "benchproject.settings"]

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            self.cmd(*args), env={**self.env, **env}, capture_output=True, check=True
        )

    def popen(self, *args: str, cwd: Path | None = None, **env: str) -> subprocess.Popen[bytes]:
        full = {**self.env, **env}
        if cwd is not None:  # another tree's redisq_django (``-m`` puts the cwd first)
            full["PYTHONPATH"] = os.pathsep.join([str(cwd), full["PYTHONPATH"]])
        return subprocess.Popen(
            self.cmd(*args),
            env=full,
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )


# ---------------------------------------------------------------------------------------
# Publish
# ---------------------------------------------------------------------------------------


def bench_publish(client: redis.Redis, broker: Broker, reps: int, n: int, batches: int) -> dict:
    raw_key = "raw:{pub}:log"
    res: dict[str, list[float]] = {"ours1": [], "raw1": [], "oursN": [], "rawN": []}

    def raw_one() -> float:
        t = time.perf_counter()
        for _ in range(n):
            data = json.dumps(PAYLOAD, separators=(",", ":")).encode()
            client.execute_command("XADD", raw_key, "*", "payload", data)
        return n / (time.perf_counter() - t)

    def ours_one() -> float:
        t = time.perf_counter()
        for _ in range(n):
            broker.publish("pub", PAYLOAD)
        return n / (time.perf_counter() - t)

    def raw_many() -> float:
        t = time.perf_counter()
        for _ in range(batches):
            with client.pipeline(transaction=False) as pipe:
                for _ in range(100):
                    data = json.dumps(PAYLOAD, separators=(",", ":")).encode()
                    pipe.execute_command("XADD", raw_key, "*", "payload", data)
                pipe.execute()
        return batches * 100 / (time.perf_counter() - t)

    def ours_many() -> float:
        t = time.perf_counter()
        for _ in range(batches):
            broker.publish_many("pub", [PAYLOAD] * 100)
        return batches * 100 / (time.perf_counter() - t)

    broker.publish("pub", PAYLOAD)  # warm-up: registry SADD, connection
    client.ping()
    for rep in range(reps):
        # Alternate the order so drift (other tenants of the CPUs) hits both sides.
        pairs: list[tuple[str, Callable[[], float]]] = [
            ("raw1", raw_one),
            ("ours1", ours_one),
            ("rawN", raw_many),
            ("oursN", ours_many),
        ]
        if rep % 2:
            pairs = [pairs[1], pairs[0], pairs[3], pairs[2]]
        for name, fn in pairs:
            res[name].append(fn())
        client.delete(raw_key, broker.keys("pub").log)
    return res


# ---------------------------------------------------------------------------------------
# publish_on_commit (Django in this process)
# ---------------------------------------------------------------------------------------

COMMIT_QUEUE = "txn"
PER_TXN = 100
COMMIT_CHUNKS = 10


def setup_django(url: str, db: Path) -> None:
    """``django.setup()`` in this process with ``benchproject.settings``, on its own SQLite
    file (the runconsumer subprocesses use another), migrated."""
    os.environ["BENCH_REDIS_URL"] = url
    os.environ["BENCH_DB"] = str(db)
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchproject.settings"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def bench_commit(client: redis.Redis, reps: int, txns: int, outbox_txns: int) -> dict:
    """Transactions of ``PER_TXN`` messages: ours (publish_on_commit, outbox off and on)
    vs a hand-written pipeline of XADDs; also with one INSERT in each transaction.

    The variants run interleaved, ``COMMIT_CHUNKS`` chunks of transactions each per
    repetition in alternating order, so that drift (other tenants of the CPUs and of
    the disk, which every commit of the INSERT variant waits for) hits all of them."""
    from benchapp.models import Order
    from django.conf import settings
    from django.db import transaction
    from django.test import override_settings

    from redisq_django import publish_on_commit
    from redisq_django.connection import get_broker
    from redisq_django.core.envelope import new_message_id
    from redisq_django.models import OutboxMessage

    raw_key = "raw:{txn}:log"
    res: dict[str, list[float]] = {}

    def insert(i: int) -> None:
        Order.objects.create(number=i, total="59.90")

    def raw(with_row: bool, with_id: bool = False) -> Callable[[int], float]:
        # with_id: also a uuid4 message id per message as a field, as publish_on_commit
        # chooses one at the call (it returns it) and the entry carries it.
        def run(k: int) -> float:
            t = time.perf_counter()
            for i in range(k):
                with transaction.atomic():
                    if with_row:
                        insert(i)
                    datas = [
                        json.dumps(PAYLOAD, separators=(",", ":")).encode() for _ in range(PER_TXN)
                    ]
                    ids = [uuid.uuid4().hex.encode() for _ in datas] if with_id else []
                with client.pipeline(transaction=False) as pipe:
                    for j, data in enumerate(datas):
                        extra = ("id", ids[j]) if with_id else ()
                        pipe.execute_command("XADD", raw_key, "*", "payload", data, *extra)
                    pipe.execute()
            return time.perf_counter() - t

        return run

    def per_message(k: int) -> float:
        # The path before the batch per transaction: each message its own on_commit
        # callback and its own round trip (here with today's prepare/send).
        broker = get_broker()
        t = time.perf_counter()
        for _ in range(k):
            with transaction.atomic():
                for _ in range(PER_TXN):
                    e = broker.prepare(COMMIT_QUEUE, PAYLOAD, id=new_message_id())
                    transaction.on_commit(functools.partial(broker.send, [e]))
        return time.perf_counter() - t

    def ours(with_row: bool, outbox: bool = False) -> Callable[[int], float]:
        def txn(i: int) -> None:
            with transaction.atomic():
                if with_row:
                    insert(i)
                for _ in range(PER_TXN):
                    publish_on_commit(COMMIT_QUEUE, PAYLOAD)

        def run(k: int) -> float:
            # The broker is rebuilt whenever the settings change (entering or leaving
            # the override): one untimed transaction first connects it.
            with override_settings(REDISQ={**settings.REDISQ, "OUTBOX": outbox}):
                txn(-1)
                t = time.perf_counter()
                for i in range(k):
                    txn(i)
                return time.perf_counter() - t

        return run

    # (name, chunk runner, transactions per repetition); the outbox and the per-message
    # path are much slower: fewer transactions.
    sides: list[tuple[str, Callable[[int], float], int]] = [
        ("raw_id", raw(False, with_id=True), txns),
        ("raw", raw(False), txns),
        ("ours", ours(False), txns),
        ("outbox", ours(False, outbox=True), outbox_txns),
        ("per_message", per_message, outbox_txns),
        ("raw_row", raw(True), txns),
        ("ours_row", ours(True), txns),
    ]
    client.ping()
    for rep in range(reps):
        elapsed = dict.fromkeys([name for name, _, _ in sides], 0.0)
        for chunk in range(COMMIT_CHUNKS):
            order = sides if (rep + chunk) % 2 == 0 else sides[::-1]
            for name, run, n in order:
                elapsed[name] += run(n // COMMIT_CHUNKS)
        for name, _, n in sides:
            res.setdefault(name, []).append(
                n // COMMIT_CHUNKS * COMMIT_CHUNKS * PER_TXN / elapsed[name]
            )
        if OutboxMessage.objects.filter(sent_at__isnull=True).exists():
            raise RuntimeError("outbox rows left unsent after the commits")
        client.delete(raw_key, get_broker().keys(COMMIT_QUEUE).log)
        OutboxMessage.objects.all().delete()
        Order.objects.all().delete()
    return res


# ---------------------------------------------------------------------------------------
# Drain
# ---------------------------------------------------------------------------------------


def fill(
    client: redis.Redis, broker: Broker, n: int, queue: str = "bench", name: str = "noop"
) -> None:
    client.flushdb()
    broker._registered.clear()
    broker.consumers.ensure(queue, name)  # registered before publishing: gets all
    for i in range(0, n, 1000):
        broker.publish_many(queue, [{"i": j} for j in range(i, min(n, i + 1000))])


def drain_runconsumer(
    denv: DjangoEnv,
    tmp: Path,
    concurrency: int,
    prefetch: int | None = None,
    history: bool = False,
    processes: int = 1,
    queue: str = "bench",
    tree: Path | None = None,
    batch_ack: bool = False,
    metrics: bool = False,
    tracing: str = "",
    trends: bool = True,
) -> tuple[float, float | None, int]:
    for old in tmp.glob("drain-*.json"):
        old.unlink()
    args = ["runconsumer", queue, "--burst", "--concurrency", str(concurrency)]
    if prefetch:
        args += ["--prefetch", str(prefetch)]
    if batch_ack:
        args.append("--batch-ack")
    if processes > 1:
        args += ["--processes", str(processes)]
    if metrics:
        args += ["--metrics-port", "0"]
    t = time.perf_counter()
    proc = denv.popen(
        *args,
        BENCH_DRAIN_OUT=str(tmp / "drain-{pid}.json"),  # one file per worker process
        BENCH_HISTORY="1" if history else "0",
        BENCH_TRACING="1" if tracing else "0",
        BENCH_OTEL_SDK={"sdk": "1", "sampled": "sampled"}.get(tracing, "0"),
        BENCH_TRENDS="1" if trends else "0",
        cwd=tree,
    )
    _, err = proc.communicate(timeout=300)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"runconsumer exited {proc.returncode}: {err.decode()[-2000:]}")
    parts = [json.loads(f.read_text()) for f in tmp.glob("drain-*.json")]
    if not parts:
        return wall, None, 0
    first, last = min(d["first"] for d in parts), max(d["last"] for d in parts)
    return wall, last - first, sum(d["count"] for d in parts)


def drain_raw(
    client: redis.Redis, broker: Broker, decode: bool = False, ack_each: bool = False
) -> float:
    """XREADGROUP COUNT 100 + XACK; with ``decode`` also json.loads each payload and
    call a no-op function with it (the least a handler-based consumer must do); with
    ``ack_each`` one XACK per message, written to the socket as it is handled and its
    reply read with the batch's (the least a consumer that acknowledges each message as
    it is handled must do: one write per message)."""
    key = broker.keys("bench").log
    group = "rawdecode" if decode else "rawacks" if ack_each else "raw"
    client.xgroup_create(key, group, "0")

    def handler(payload: Any) -> None:
        pass

    conn = client.connection_pool.get_connection()
    t = time.perf_counter()
    handled = 0
    try:
        while True:
            reply = client.execute_command(
                "XREADGROUP", "GROUP", group, "c1", "COUNT", 100, "STREAMS", key, ">"
            )
            if not reply:
                break
            entries = reply[0][1]
            if decode:
                for _, fields in entries:
                    handler(json.loads(fields[b"payload"]))
            if ack_each:
                for eid, fields in entries:
                    handler(fields)
                    conn.send_packed_command(conn.pack_command("XACK", key, group, eid), False)
                for _ in entries:
                    conn.read_response()
            else:
                client.execute_command("XACK", key, group, *[eid for eid, _ in entries])
            handled += len(entries)
    finally:
        client.connection_pool.release(conn)
    elapsed = time.perf_counter() - t
    assert handled >= DRAIN_N, handled
    return elapsed


#: The last commit whose worker acknowledged once per batch (issue 8 changed it to one
#: ack per message, written as each handler returns): the baseline of the ack rows.
BATCH_ACK_REF = "bb01718"


def batch_ack_tree(tmp: Path) -> Path | None:
    """``redisq_django`` as of :data:`BATCH_ACK_REF`, extracted into ``tmp`` (None when
    the repository's history is not at hand)."""
    tree = tmp / "batch-ack"
    tree.mkdir(exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", BATCH_ACK_REF, "redisq_django"],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        return None
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def bench_drain(client: redis.Redis, broker: Broker, denv: DjangoEnv, tmp: Path, reps: int):
    res: dict[str, list[float]] = {}
    old_tree = batch_ack_tree(tmp)

    def add(name: str, value: float | None) -> None:
        if value is not None:
            res.setdefault(name, []).append(value)

    for rep in range(reps):
        log(f"  drain rep {rep + 1}/{reps}")
        fill(client, broker, DRAIN_N)
        add("raw", drain_raw(client, broker))  # own group: the noop group still has all
        add("raw_decode", drain_raw(client, broker, decode=True))
        add("raw_acks", drain_raw(client, broker, ack_each=True))
        wall, span, count = drain_runconsumer(denv, tmp, 1)
        assert count == DRAIN_N, count
        add("c1_wall", wall)
        add("c1_span", span)
        fill(client, broker, DRAIN_N)
        wall, span, count = drain_runconsumer(denv, tmp, 8)
        assert count == DRAIN_N, count
        add("c8_wall", wall)
        add("c8_span", span)
        fill(client, broker, DRAIN_N)
        wall, span, count = drain_runconsumer(denv, tmp, 1, prefetch=100)
        assert count == DRAIN_N, count
        add("c1p100_wall", wall)
        add("c1p100_span", span)
        # History on: every ack also writes its batch's `handled` event (same script).
        # Run right after a history-off run of the same shape, so both see the same load.
        fill(client, broker, DRAIN_N)
        wall, span, count = drain_runconsumer(denv, tmp, 1, history=True)
        assert count == DRAIN_N, count
        events = client.xlen(broker.keys("bench").events)
        assert events > 0, "history on but no lifecycle events were written"
        add("c1h_span", span)
        fill(client, broker, DRAIN_N)
        wall, span, count = drain_runconsumer(denv, tmp, 1)
        assert count == DRAIN_N, count
        add("c1off_span", span)
        # Ack per message (this tree) vs the old batch ack (BATCH_ACK_REF), history off
        # and on, each pair back to back.
        for hist in (False, True) if old_tree is not None else ():
            suffix = "h" if hist else ""
            for key, tree in ((f"ackmsg{suffix}", None), (f"ackbatch{suffix}", old_tree)):
                fill(client, broker, DRAIN_N)
                wall, span, count = drain_runconsumer(denv, tmp, 1, history=hist, tree=tree)
                assert count == DRAIN_N, count
                add(f"{key}_span", span)
        # runconsumer --batch-ack (this tree) vs the default ack per message, back to back.
        for key, batch_ack in (("flagbatch", True), ("flagmsg", False)):
            fill(client, broker, DRAIN_N)
            wall, span, count = drain_runconsumer(denv, tmp, 1, batch_ack=batch_ack)
            assert count == DRAIN_N, count
            add(f"{key}_span", span)
        # Two worker processes (one thread each) under the supervisor vs one, no-op
        # handlers and CPU-bound ones (bench_cpu/spin), each pair back to back.
        for prefix, queue, name, n in (
            ("", "bench", "noop", DRAIN_N),
            ("cpu_", "bench_cpu", "spin", CPU_DRAIN_N),
        ):
            for processes in (2, 1):
                fill(client, broker, n, queue, name)
                wall, span, count = drain_runconsumer(
                    denv, tmp, 1, processes=processes, queue=queue
                )
                assert count == n, count
                add(f"{prefix}p{processes}_wall", wall)
                add(f"{prefix}p{processes}_span", span)
        # Fixed cost: Django start-up, the burst exit's last empty fetch, shutdown.
        client.flushdb()
        broker._registered.clear()
        broker.consumers.ensure("bench", "noop")
        wall, _, _ = drain_runconsumer(denv, tmp, 1)
        add("empty_wall", wall)
    return res


def bench_observe(
    client: redis.Redis, broker: Broker, denv: DjangoEnv, tmp: Path, reps: int
) -> dict[str, list[float]]:
    """Metrics and tracing on vs off: 20k no-op messages, c=1, first->last handled, each
    "on" run back to back with an "off" run (the order alternates between repetitions, so
    that neither side always runs second)."""
    res: dict[str, list[float]] = {}
    variants = {
        "metrics": {"metrics": True},
        "tracing_noop": {"tracing": "noop"},  # TRACING on, no SDK configured: no-op spans
        "tracing_sdk": {"tracing": "sdk"},  # the SDK records every span
        "tracing_sampled": {"tracing": "sampled"},  # the SDK keeps 1 % of traces
    }
    for rep in range(reps):
        log(f"  metrics/tracing rep {rep + 1}/{reps}")
        for name, on in variants.items():
            pair = [(f"{name}_on", on), (f"{name}_off", {})]
            for key, kwargs in pair if rep % 2 == 0 else reversed(pair):
                fill(client, broker, DRAIN_N)
                _, span, count = drain_runconsumer(denv, tmp, 1, **kwargs)  # type: ignore[arg-type]
                assert count == DRAIN_N, count
                if span is not None:
                    res.setdefault(key, []).append(span)
    return res


def bench_trends(
    client: redis.Redis, broker: Broker, denv: DjangoEnv, tmp: Path, reps: int
) -> dict[str, list[float]]:
    """Trend counters on (the default) vs off: the same drain of 20k no-op messages (c=1,
    first->last handled) back to back, the order alternating between repetitions; the
    same in this process (CPU seconds of an in-process Worker); and publishing."""
    from redisq_django.core import CoreConfig

    res: dict[str, list[float]] = {}
    for rep in range(reps):
        log(f"  trends rep {rep + 1}/{reps}")
        pair = [("trends_on", True), ("trends_off", False)]
        for key, on in pair if rep % 2 == 0 else reversed(pair):
            fill(client, broker, DRAIN_N)
            _, span, count = drain_runconsumer(denv, tmp, 1, trends=on)
            assert count == DRAIN_N, count
            assert counted_handled(client) == (DRAIN_N if on else 0)  # counted exactly
            if span is not None:
                res.setdefault(key, []).append(span)
            config = CoreConfig(trends=on)
            res.setdefault(f"ip_{key}", []).append(drain_in_process(client, "bench", [], config))
            publisher = Broker(client, config)
            t = time.perf_counter()
            for _ in range(2000):
                publisher.publish("pub", PAYLOAD)
            res.setdefault(f"pub_{key}", []).append(2000 / (time.perf_counter() - t))
    return res


def counted_handled(client: redis.Redis) -> int:
    """The ``handled:noop`` trend counters of queue ``bench``, summed over its minutes."""
    keys = list(client.scan_iter(match="redisq:{bench}:trend:*"))
    return sum(int(client.hget(k, "handled:noop") or 0) for k in keys)


def trends_rows(res: dict) -> list[dict]:
    rows = []
    for label, name, unit, target in (
        ("drain 20k, c=1, trends on vs off (raw column), first->last", "", "s", 0.95),
        ("in-process drain 20k, c=1, CPU, trends on vs off", "ip_", "s", 0.95),
        ("publish, 1 msg/call, trends on vs off (raw column)", "pub_", "msg/s", None),
    ):
        if f"{name}trends_on" in res and f"{name}trends_off" in res:
            on, off = median(res[f"{name}trends_on"]), median(res[f"{name}trends_off"])
            rows.append(_ratio_row(label, on, off, unit, target))
    return rows


def drain_in_process(
    client: redis.Redis,
    queue: str,
    middleware: list[Any],
    config: Any = None,
    settle: Any = None,
) -> float:
    """CPU seconds this process spends draining DRAIN_N no-op messages with an in-process
    Worker (c=1) and ``middleware``: less sensitive than wall time to other jobs on the
    machine's shared cores. ``settle`` runs inside the measure after the drain (what the
    middleware left to a background thread, e.g. exporting spans, is its cost too, and
    must not land in the next measure)."""
    from redisq_django.core import ConsumerSpec
    from redisq_django.core.worker import Worker, WorkerOptions

    broker = Broker(client, config)
    fill(client, broker, DRAIN_N, queue, "noop")
    spec = ConsumerSpec(queue, "noop", lambda m: None, start="earliest")
    options = WorkerOptions(burst=True, stats_interval=0, block_ms=50)
    worker = Worker(broker, [spec], options, middleware=middleware)
    cpu = time.process_time()
    assert worker.run() == 0
    if settle is not None:
        settle()
    cpu = time.process_time() - cpu
    assert worker.totals()["handled"] == DRAIN_N, worker.totals()
    return cpu


def bench_observe_in_process(client: redis.Redis, reps: int) -> dict[str, list[float]]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from prometheus_client import CollectorRegistry

    from redisq_django.metrics.prometheus import PrometheusMiddleware
    from redisq_django.metrics.tracing import Tracing

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    sdk = TracerProvider()
    sdk.add_span_processor(BatchSpanProcessor(Drop()))
    sampled = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.01)))
    sampled.add_span_processor(BatchSpanProcessor(Drop()))
    sampled_01 = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.001)))
    sampled_01.add_span_processor(BatchSpanProcessor(Drop()))
    variants: dict[str, tuple[Any, Any]] = {  # the middleware; what settles after
        "metrics": (lambda: [PrometheusMiddleware(CollectorRegistry())], None),
        "tracing_noop": (lambda: [Tracing()], None),  # no global SDK here: no-op spans
        "tracing_sdk": (lambda: [Tracing(tracer_provider=sdk)], sdk.force_flush),
        "tracing_sampled": (lambda: [Tracing(tracer_provider=sampled)], sampled.force_flush),
        "tracing_sampled_01": (
            lambda: [Tracing(tracer_provider=sampled_01)],
            sampled_01.force_flush,
        ),
    }
    res: dict[str, list[float]] = {}
    for rep in range(reps):
        log(f"  in-process rep {rep + 1}/{reps}")
        for name, (make, settle) in variants.items():
            pair = [(f"ip_{name}_on", make, settle), (f"ip_{name}_off", list, None)]
            for key, mw, after in pair if rep % 2 == 0 else reversed(pair):
                cpu = drain_in_process(client, "bench", mw(), settle=after)
                res.setdefault(key, []).append(cpu)
    for provider in (sdk, sampled, sampled_01):
        provider.shutdown()
    return res


def observe_rows(obs: dict) -> list[dict]:
    rows = []
    for label, name, target in (
        ("drain 20k, c=1, --metrics-port vs none (raw column), first->last", "metrics", 0.95),
        (
            "drain 20k, c=1, TRACING on, no SDK vs off (raw column), first->last",
            "tracing_noop",
            0.95,
        ),
        ("drain 20k, c=1, TRACING on, SDK vs off (raw column), first->last", "tracing_sdk", 0.95),
        (
            "drain 20k, c=1, TRACING on, SDK keeping 1% vs off (raw column), first->last",
            "tracing_sampled",
            0.95,
        ),
    ):
        if f"{name}_on" in obs and f"{name}_off" in obs:
            on, off = median(obs[f"{name}_on"]), median(obs[f"{name}_off"])
            rows.append(_ratio_row(label, on, off, "s", target))
    for label, name, target in (
        ("in-process drain 20k, c=1, CPU, PrometheusMiddleware vs none", "metrics", 0.95),
        (
            "in-process drain 20k, c=1, CPU, Tracing used without an SDK vs none",
            "tracing_noop",
            None,
        ),
        ("in-process drain 20k, c=1, CPU, Tracing (SDK) vs none", "tracing_sdk", 0.95),
        (
            "in-process drain 20k, c=1, CPU, Tracing (SDK, 1% sampled) vs none",
            "tracing_sampled",
            0.95,
        ),
        (
            "in-process drain 20k, c=1, CPU, Tracing (SDK, 0.1% sampled) vs none",
            "tracing_sampled_01",
            None,
        ),
    ):
        if f"ip_{name}_on" in obs and f"ip_{name}_off" in obs:
            on, off = median(obs[f"ip_{name}_on"]), median(obs[f"ip_{name}_off"])
            rows.append(_ratio_row(label, on, off, "s", target))
    return rows


# ---------------------------------------------------------------------------------------
# Latency and delayed lateness (one runconsumer subprocess for both)
# ---------------------------------------------------------------------------------------


def start_latency_consumer(client: redis.Redis, broker: Broker, denv: DjangoEnv):
    client.flushdb()
    broker._registered.clear()
    broker.consumers.ensure("bench_latency", "latency")
    proc = denv.popen("runconsumer", "bench_latency", "--stats-interval", "0")
    deadline = time.monotonic() + 30
    while not client.llen("bench:latency"):  # ready once a warm-up message is handled
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            _, err = proc.communicate()
            raise RuntimeError(f"latency consumer did not start: {err.decode()[-2000:]}")
        broker.publish("bench_latency", {"kind": "warmup"})
        time.sleep(0.1)
    time.sleep(0.3)
    client.delete("bench:latency")
    return proc


def collect(client: redis.Redis, n: int, timeout: float) -> list[dict]:
    deadline = time.monotonic() + timeout
    while client.llen("bench:latency") < n and time.monotonic() < deadline:
        time.sleep(0.05)
    records = [json.loads(r) for r in client.lrange("bench:latency", 0, -1)]
    client.delete("bench:latency")
    return records


def latency_run(client: redis.Redis, broker: Broker, seconds: float) -> dict[str, list[float]]:
    n = int(seconds * RATE)
    interval = 1.0 / RATE
    start = time.perf_counter()
    for i in range(n):
        target = start + i * interval
        delay = target - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        broker.publish("bench_latency", {"kind": "lat", "t0": time.time()})
    records = [r for r in collect(client, n, 10.0) if r["kind"] == "lat"]
    if len(records) < n:
        log(f"  latency: only {len(records)}/{n} messages recorded")
    return {
        "published": [r["published"] * 1000 for r in records],
        "t0": [r["t0"] * 1000 for r in records],
    }


def delayed_run(client: redis.Redis, broker: Broker, n: int, rng: random.Random) -> list[float]:
    # All published at once with delays of 0.1-1 s; then this process stays silent until
    # they are all due: any command sent to Redis meanwhile (e.g. polling for results)
    # wakes its event loop and would hide how late blocked fetches time out.
    delays = [rng.uniform(0.1, 1.0) for _ in range(n)]
    for d in delays:
        broker.publish("bench_latency", {"kind": "delayed"}, delay=d)
    time.sleep(max(delays) + 0.3)
    records = [r for r in collect(client, n, 10.0) if r["kind"] == "delayed"]
    if len(records) < n:
        log(f"  delayed: only {len(records)}/{n} messages recorded")
    return [r["due"] * 1000 for r in records]


def bench_latency(
    client, broker, denv, reps: int, seconds: float, delayed_n: int, *, latency: bool = True
):
    rng = random.Random(42)
    res: dict[str, list[float]] = {}
    proc = start_latency_consumer(client, broker, denv)
    try:
        for rep in range(reps):
            log(f"  latency rep {rep + 1}/{reps}")
            if latency:
                lat = latency_run(client, broker, seconds)
                for what in ("published", "t0"):
                    res.setdefault(f"lat_{what}_p50", []).append(pct(lat[what], 50))
                    res.setdefault(f"lat_{what}_p99", []).append(pct(lat[what], 99))
                    res.setdefault(f"lat_{what}_max", []).append(max(lat[what]))
                time.sleep(0.3)
            late = delayed_run(client, broker, delayed_n, rng)
            res.setdefault("late_p50", []).append(pct(late, 50))
            res.setdefault("late_p99", []).append(pct(late, 99))
            res.setdefault("late_max", []).append(max(late))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
    return res


def raw_latency(client: redis.Redis, seconds: float) -> dict[str, float]:
    """Raw baseline: a thread blocked in XREADGROUP BLOCK 0 (no promote loop), XACK per
    batch, while this thread publishes at the same rate. Reports publish->receive."""
    import threading

    key = "raw:{lat}:log"
    client.delete(key)
    client.xgroup_create(key, "g", "$", mkstream=True)
    n = int(seconds * RATE)
    lat: list[float] = []
    reader = redis.Redis(connection_pool=client.connection_pool)

    def consume() -> None:
        got = 0
        while got < n:
            reply = reader.execute_command(
                "XREADGROUP", "GROUP", "g", "c", "COUNT", 10, "BLOCK", 1000, "STREAMS", key, ">"
            )
            if not reply:
                continue
            now = time.time()
            entries = reply[0][1]
            for _, fields in entries:
                lat.append((now - float(fields[b"t0"])) * 1000)
            reader.execute_command("XACK", key, "g", *[e for e, _ in entries])
            got += len(entries)

    th = threading.Thread(target=consume, daemon=True)
    th.start()
    interval = 1.0 / RATE
    start = time.perf_counter()
    for i in range(n):
        target = start + i * interval
        delay = target - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        client.execute_command("XADD", key, "*", "t0", repr(time.time()))
    th.join(10)
    return {"p50": pct(lat, 50), "p99": pct(lat, 99)}


# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------


def fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "msg/s":
        return f"{v:,.0f} msg/s"
    if unit == "s":
        return f"{v:.2f} s"
    return f"{v:.2f} ms"


def _row(name: str, ours: str, raw: str, ratio: str, target: str, met: str) -> dict:
    return {
        "measurement": name,
        "ours": ours,
        "raw": raw,
        "ratio": ratio,
        "target": target,
        "met": met,
    }


def _ratio_row(name: str, ours: float, raw: float, unit: str, target: float | None) -> dict:
    # Ratio as throughput, ours/raw (for durations: raw_time / our_time).
    r = ours / raw if unit == "msg/s" else raw / ours
    met = ("yes" if r >= target else "NO") if target else ""
    return _row(
        name,
        fmt(ours, unit),
        fmt(raw, unit),
        f"{r:.2f}x",
        f">= {target}x raw" if target else "(info)",
        met,
    )


def publish_rows(pub: dict) -> list[dict]:
    return [
        _ratio_row("publish, 1 msg/call", median(pub["ours1"]), median(pub["raw1"]), "msg/s", 0.8),
        _ratio_row(
            "publish_many, 100/call", median(pub["oursN"]), median(pub["rawN"]), "msg/s", 0.8
        ),
    ]


def commit_rows(com: dict) -> list[dict]:
    return [
        _ratio_row(
            "publish_on_commit x100 in one transaction",
            median(com["ours"]),
            median(com["raw"]),
            "msg/s",
            0.8,
        ),
        _ratio_row(
            "  same, vs raw + a uuid4 id field per message",
            median(com["ours"]),
            median(com["raw_id"]),
            "msg/s",
            None,
        ),
        _ratio_row(
            "  batched (ours) vs one send per msg (raw column)",
            median(com["ours"]),
            median(com["per_message"]),
            "msg/s",
            None,
        ),
        _ratio_row(
            "same + 1 INSERT in the txn (raw: same INSERT)",
            median(com["ours_row"]),
            median(com["raw_row"]),
            "msg/s",
            None,
        ),
        _ratio_row(
            "outbox on (ours) vs off (raw column), x100/txn",
            median(com["outbox"]),
            median(com["ours"]),
            "msg/s",
            None,
        ),
    ]


def drain_rows(drain: dict) -> list[dict]:
    rows = []
    raw = median(drain["raw"])
    for label, key, target in (
        ("drain 20k, c=1, process wall", "c1_wall", 0.5),
        ("drain 20k, c=1, first->last handled", "c1_span", 0.5),
        ("drain 20k, c=8, process wall", "c8_wall", 0.5),
        ("drain 20k, c=8, first->last handled", "c8_span", 0.5),
        ("drain 20k, c=1 --prefetch 100, wall", "c1p100_wall", None),
        ("drain 20k, c=1 --prefetch 100, first->last", "c1p100_span", None),
    ):
        if key in drain:
            rows.append(_ratio_row(label, median(drain[key]), raw, "s", target))
    if "c1h_span" in drain and "c1off_span" in drain:
        rows.append(
            _ratio_row(
                "drain 20k, c=1, history on (vs off, first->last)",
                median(drain["c1h_span"]),
                median(drain["c1off_span"]),
                "s",
                0.9,
            )
        )
    for label, ours, base in (
        ("drain 20k, c=1, ack per message vs batch ack (raw column)", "ackmsg", "ackbatch"),
        ("drain 20k, c=1, history on, ack per message vs batch ack", "ackmsgh", "ackbatchh"),
        ("drain 20k, c=1, --batch-ack vs default (raw column)", "flagbatch", "flagmsg"),
    ):
        if f"{ours}_span" in drain and f"{base}_span" in drain:
            rows.append(
                _ratio_row(
                    f"{label}, first->last",
                    median(drain[f"{ours}_span"]),
                    median(drain[f"{base}_span"]),
                    "s",
                    None,
                )
            )
    for label, key in (
        ("drain 20k, c=1, --processes 2 vs 1 (raw column), wall", "p{}_wall"),
        ("drain 20k, c=1, --processes 2 vs 1 (raw column), first->last", "p{}_span"),
        ("drain 4k CPU-bound 0.5 ms, --processes 2 vs 1, wall", "cpu_p{}_wall"),
        ("drain 4k CPU-bound 0.5 ms, --processes 2 vs 1, first->last", "cpu_p{}_span"),
    ):
        if key.format(2) in drain:
            two, one = median(drain[key.format(2)]), median(drain[key.format(1)])
            rows.append(_ratio_row(label, two, one, "s", None))
    if "raw_decode" in drain:
        rows.append(
            _ratio_row(
                "raw loop + json.loads + call per msg (vs raw)",
                median(drain["raw_decode"]),
                raw,
                "s",
                None,
            )
        )
    if "raw_acks" in drain:
        rows.append(
            _ratio_row(
                "raw loop + an XACK written per msg (vs raw)",
                median(drain["raw_acks"]),
                raw,
                "s",
                None,
            )
        )
        if "c1_span" in drain:
            rows.append(
                _ratio_row(
                    "drain 20k, c=1, first->last vs raw + an XACK per msg",
                    median(drain["c1_span"]),
                    median(drain["raw_acks"]),
                    "s",
                    None,
                )
            )
    if "empty_wall" in drain:
        rows.append(
            _row(
                "runconsumer --burst, empty queue (fixed cost)",
                fmt(median(drain["empty_wall"]), "s"),
                "-",
                "",
                "(info)",
                "",
            )
        )
    return rows


def latency_rows(lat: dict, rawlat: dict) -> list[dict]:
    rows = []

    def abs_row(name: str, key: str, raw: float | None, target: float | None) -> None:
        v = median(lat[key])
        met = ("yes" if v < target else "NO") if target else ""
        rows.append(
            _row(
                name,
                fmt(v, "ms"),
                fmt(raw, "ms"),
                f"{v / raw:.1f}x raw" if raw else "",
                f"< {target:g} ms" if target else "(info)",
                met,
            )
        )

    abs_row("latency p50 @200/s (vs published_at)", "lat_published_p50", None, None)
    abs_row("latency p99 @200/s (vs published_at)", "lat_published_p99", None, 5)
    abs_row("latency p50 @200/s (vs publisher time.time())", "lat_t0_p50", rawlat["p50"], None)
    abs_row("latency p99 @200/s (vs publisher time.time())", "lat_t0_p99", rawlat["p99"], 5)
    abs_row("delayed lateness p50 (due_at -> handler)", "late_p50", None, None)
    abs_row("delayed lateness p99 (due_at -> handler)", "late_p99", None, 50)
    abs_row("delayed lateness max", "late_max", None, None)
    if "hz100_late_p99" in lat:
        abs_row("delayed lateness p50, redis --hz 100", "hz100_late_p50", None, None)
        abs_row("delayed lateness p99, redis --hz 100", "hz100_late_p99", None, 50)
    return rows


def table(rows: list[dict]) -> str:
    cols = ["measurement", "ours", "raw", "ratio", "target", "met"]
    head = ["measurement", "ours", "raw", "ratio", "target", "met?"]
    widths = [max(len(h), *(len(r[c]) for r in rows)) for h, c in zip(head, cols, strict=True)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    for r in rows:
        cells = [r[c].ljust(w) for c, w in zip(cols, widths, strict=True)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="repetitions per figure (median)")
    ap.add_argument("--publish-n", type=int, default=2000, help="single publishes per rep")
    ap.add_argument("--batches", type=int, default=40, help="batches of 100 per rep")
    ap.add_argument("--txns", type=int, default=200, help="transactions of 100 per rep")
    ap.add_argument("--outbox-txns", type=int, default=40, help="the same with the outbox")
    ap.add_argument("--latency-seconds", type=float, default=5.0)
    ap.add_argument("--delayed-n", type=int, default=150)
    ap.add_argument(
        "--only",
        default="publish,commit,drain,observe,trends,latency,ordered,replicas,partitions,flow,inbox,"
        "deadletters",
        help="comma-separated subset to run",
    )
    ap.add_argument(
        "--redis-arg", action="append", default=[], help="extra redis-server option, e.g. --hz"
    )
    args = ap.parse_args()
    only = set(args.only.split(","))
    OUT.mkdir(exist_ok=True)
    t_start = time.perf_counter()

    with tempfile.TemporaryDirectory(prefix="redisq-bench-") as tmpdir:
        tmp = Path(tmpdir)
        extra = [a for pair in args.redis_arg for a in pair.split(" ", 1)]
        server = RedisServer(redis_binary(), tmp / "redis", extra_args=extra).start()
        try:
            client = server.client()
            broker = Broker(client)
            info = machine(client)
            log(f"redis-server {info['redis']} on {server.url}; python {info['python']}")
            denv = DjangoEnv(server.url, tmp)
            denv.run("migrate", "-v", "0")

            pub: dict = {}
            com: dict = {}
            drain: dict = {}
            obs: dict = {}
            trn: dict = {}
            ordr: dict = {}
            repl: dict = {}
            parts: list = []
            flw: dict = {}
            inb: dict = {}
            dls: dict = {}
            lat: dict = {}
            rawlat = {"p50": None, "p99": None}
            if "publish" in only:
                log("publish ...")
                pub = bench_publish(client, broker, args.reps, args.publish_n, args.batches)
            if "commit" in only:
                log("publish_on_commit ...")
                setup_django(server.url, tmp / "commit.sqlite3")
                com = bench_commit(client, args.reps, args.txns, args.outbox_txns)
            if "drain" in only:
                log("drain ...")
                drain = bench_drain(client, broker, denv, tmp, args.reps)
            if "observe" in only:
                log("drain with metrics / tracing on and off ...")
                obs = bench_observe(client, broker, denv, tmp, args.reps)
                obs.update(bench_observe_in_process(client, args.reps))
            if "trends" in only:
                log("drain with the trend counters on and off ...")
                trn = bench_trends(client, broker, denv, tmp, args.reps)
            if "ordered" in only:
                log("ordered consumers vs unordered ...")
                ordr = bench_ordered(client, args.reps, log)
            if "replicas" in only:
                log("ordered reads waiting for a replica vs not ...")
                repl = bench_replicas(redis_binary(), args.reps, log)
            if "flow" in only:
                log("rate and concurrency limits: cost and precision ...")
                flw = bench_flow(client, args.reps, log)
            if "inbox" in only:
                log("atomic=True consumers (the inbox) on SQLite and PostgreSQL ...")
                script = str(BENCH_DIR / "inbox.py")
                done = subprocess.run(
                    [sys.executable, script, server.url, str(tmp), str(args.reps)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                inb = json.loads(done.stdout.strip().splitlines()[-1])
            if "deadletters" in only:
                log("bulk retry of dead letters (SQLite) ...")
                script = str(BENCH_DIR / "deadletters.py")
                done = subprocess.run(
                    [sys.executable, script, server.url, str(tmp), str(args.reps)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                dls = json.loads(done.stdout.strip().splitlines()[-1])
            if "partitions" in only:
                log("partitioned queues on a 3-master cluster ...")
                parts = bench_partitions()
            if "latency" in only:
                log("latency ...")
                raws = [raw_latency(client, 2.0) for _ in range(args.reps)]
                rawlat = {k: median([r[k] for r in raws]) for k in ("p50", "p99")}
                lat = bench_latency(
                    client, broker, denv, args.reps, args.latency_seconds, args.delayed_n
                )
        finally:
            server.stop()
        if "latency" in only and not args.redis_arg:
            log("delayed lateness again, redis-server --hz 100 ...")
            server = RedisServer(redis_binary(), tmp / "redis-hz100", extra_args=("--hz", "100"))
            server.start()
            try:
                client = server.client()
                denv = DjangoEnv(server.url, tmp / "hz100")
                (tmp / "hz100").mkdir()
                denv.run("migrate", "-v", "0")
                hz100 = bench_latency(
                    client, Broker(client), denv, args.reps, 0, args.delayed_n, latency=False
                )
                lat.update({f"hz100_{k}": v for k, v in hz100.items()})
            finally:
                server.stop()

    rows = (publish_rows(pub) if pub else []) + (commit_rows(com) if com else [])
    rows += drain_rows(drain) if drain else []
    rows += observe_rows(obs) if obs else []
    rows += trends_rows(trn) if trn else []
    rows += ordered_rows(ordr, median, _ratio_row) if ordr else []
    rows += replica_rows(repl, median, _row, _ratio_row) if repl else []
    rows += partition_rows(parts, _row) if parts else []
    rows += flow_rows(flw, median, _row, _ratio_row) if flw else []
    rows += inbox_rows(inb, median, _row, _ratio_row) if inb else []
    rows += deadletter_rows(dls, median, _row) if dls else []
    rows += latency_rows(lat, rawlat) if lat else []
    text = table(rows)
    elapsed = time.perf_counter() - t_start
    print()
    print(text)
    print()
    for k in ("cpu", "cores", "python", "redis", "redis_hz", "redis_py", "hiredis", "django"):
        print(f"{k}: {info[k]}")
    print(f"date: {info['date']}; reps: {args.reps} (median); run took {elapsed:.0f} s")
    raw_data = {"machine": info, "publish": pub, "commit": com, "drain": drain, "latency": lat}
    raw_data["observe"] = obs
    raw_data["trends"] = trn
    raw_data["ordered"] = ordr
    raw_data["replicas"] = repl
    raw_data["partitions"] = parts
    raw_data["flow"] = flw
    raw_data["inbox"] = inb
    raw_data["deadletters"] = dls
    raw_data["raw_latency"] = rawlat
    raw_data["args"] = vars(args)
    (OUT / "results.json").write_text(json.dumps(raw_data, indent=2))
    (OUT / "results.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
