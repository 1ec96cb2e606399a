"""An ordered consumer's reads waiting for a replica (``wait_replicas``) vs not (issue 32).

A private primary with one replica (both on this machine, loopback), no persistence.
Measured on the same messages, with and without ``wait_replicas=1``, back to back (the
order alternating between repetitions), wall time:

* **one read**: an ordered read that lets one keyed message out (its ack, after it, is
  not timed), 500 times: what one ``WAIT`` adds to a read (the master asks the replica
  for its offset and waits for the answer: a round trip to the replica);
* **drain**: an in-process ``Worker`` draining 10,000 no-op messages over 1,000 keys,
  one handler thread (reads of up to ``prefetch`` messages: one ``WAIT`` per read, not
  per message), and 2,000 messages whose handler waits 2 ms over 64 keys with 8 threads.

Run alone: ``.venv/bin/python bench/run.py --only replicas``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from redisq_django.core import Broker, ConsumerSpec, CoreConfig
from redisq_django.core.worker import Worker, WorkerOptions
from tests.support.redis_server import RedisServer, start_replica

QUEUE, CONSUMER = "replicated", "c"
READS = 500
COST_N, COST_KEYS = 10_000, 1_000
IO_N, IO_KEYS, IO_WAIT_S, IO_THREADS = 2_000, 64, 0.002, 8


def _broker(master: RedisServer, wait: int) -> tuple[Any, Broker]:
    client = master.client()
    return client, Broker(client, CoreConfig(ordered_wait_replicas=wait))


def _fresh(client: Any, broker: Broker) -> None:
    client.flushall()
    broker._registered.clear()
    broker.consumers.ensure(QUEUE, CONSUMER, "earliest")


def _reads(master: RedisServer, wait: int) -> float:
    """Microseconds per read of one keyed message (acknowledged untimed after it)."""
    client, broker = _broker(master, wait)
    try:
        _fresh(client, broker)
        sub = broker.subscribe(QUEUE, CONSUMER, "i", ordered=True)
        took = 0.0
        for i in range(READS):
            broker.publish(QUEUE, {"i": i}, key=f"k{i}")
            started = time.perf_counter()
            got = sub.fetch(count=1, block_ms=0)
            took += time.perf_counter() - started
            sub.ack(got)
        return took / READS * 1e6
    finally:
        client.close()


def _drain(master: RedisServer, wait: int, n: int, keys: int, wait_s: float, threads: int) -> float:
    """Seconds an in-process worker takes to handle ``n`` messages over ``keys`` keys."""
    client, broker = _broker(master, wait)
    try:
        _fresh(client, broker)
        for i in range(n):  # one by one: publish_many gives its whole batch one key
            broker.publish(QUEUE, {"i": i}, key=f"k{i % keys}")

        def handler(message: Any) -> None:
            if wait_s:
                time.sleep(wait_s)

        spec = ConsumerSpec(
            QUEUE, CONSUMER, handler, concurrency=threads, ordered=True, start="earliest"
        )
        options = WorkerOptions(
            burst=True, stats_interval=0, block_ms=50, elastic_threads=threads == 1
        )
        worker = Worker(broker, [spec], options)
        started = time.perf_counter()
        assert worker.run() == 0
        elapsed = time.perf_counter() - started
        assert worker.totals()["handled"] == n, worker.totals()
        assert worker.totals()["unreplicated"] == 0, worker.totals()
        return elapsed
    finally:
        client.close()


def bench_replicas(binary: str, reps: int, log: Any) -> dict[str, list[float]]:
    """Per variant and repetition: µs per read, or drain seconds (module docstring)."""
    res: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="redisq-bench-replicas-") as tmpdir:
        tmp = Path(tmpdir)
        master = RedisServer(binary, tmp / "master").start()
        replica = start_replica(binary, tmp / "replica", master)
        try:
            for rep in range(reps):
                log(f"  replicas rep {rep + 1}/{reps}")
                order = (1, 0) if rep % 2 == 0 else (0, 1)
                for wait in order:
                    res.setdefault(f"read_{wait}", []).append(_reads(master, wait))
                for wait in order:
                    s = _drain(master, wait, COST_N, COST_KEYS, 0, 1)
                    res.setdefault(f"cost_{wait}", []).append(s)
                for wait in order:
                    s = _drain(master, wait, IO_N, IO_KEYS, IO_WAIT_S, IO_THREADS)
                    res.setdefault(f"io_{wait}", []).append(s)
        finally:
            replica.stop()
            master.stop()
    return res


def replica_rows(res: dict[str, list[float]], median: Any, row: Any, ratio_row: Any) -> list[dict]:
    """Rows of the results table: with the wait as "ours", without as "raw"."""
    with_wait, without = median(res["read_1"]), median(res["read_0"])
    return [
        row(
            "ordered read of 1 keyed msg, wait_replicas=1 vs 0 (per read)",
            f"{with_wait:.0f} µs",
            f"{without:.0f} µs",
            f"+{with_wait - without:.0f} µs",
            "(info)",
            "",
        ),
        ratio_row(
            f"ordered drain, wait_replicas=1 vs 0, no-op, c=1, {COST_KEYS} keys ({COST_N} msgs)",
            COST_N / median(res["cost_1"]),
            COST_N / median(res["cost_0"]),
            "msg/s",
            None,
        ),
        ratio_row(
            f"ordered drain, wait_replicas=1 vs 0, 2 ms I/O, c={IO_THREADS}, {IO_KEYS} keys",
            IO_N / median(res["io_1"]),
            IO_N / median(res["io_0"]),
            "msg/s",
            None,
        ),
    ]
