"""Ordered consumers vs unordered ones, on the same messages, in the same run (issue 25).

Two measures, each an in-process ``Worker`` draining a queue filled beforehand, ordered
and unordered back to back (the order alternating between repetitions), wall time:

* **cost per message**: 10,000 no-op messages over 1,000 distinct ordering keys, one
  handler thread: what the read that lets a message out and the acknowledgement that
  hands its key on cost against a plain ``XREADGROUP`` and ``XACK``;
* **parallelism by keys in flight**: 2,000 messages whose handler waits 2 ms (I/O),
  8 handler threads (fixed, not elastic), over 1, 8, 64 and 1,000 distinct keys: one key
  runs one message at a time, so an ordered consumer's throughput grows with the
  number of keys that have work, up to the threads.

Run alone: ``.venv/bin/python bench/run.py --only ordered``.
"""

from __future__ import annotations

import time
from typing import Any

import redis

from redisq_django.core import Broker, ConsumerSpec
from redisq_django.core.worker import Worker, WorkerOptions

COST_N, COST_KEYS = 10_000, 1_000
PARALLEL_N, PARALLEL_WAIT_S, PARALLEL_THREADS = 2_000, 0.002, 8
KEY_COUNTS = (1, 8, 64, 1_000)


def _fill(client: redis.Redis, broker: Broker, n: int, keys: int) -> None:
    client.flushdb()
    broker._registered.clear()
    broker.consumers.ensure("ordered", "c")
    for i in range(n):  # one by one: publish_many gives its whole batch one key
        broker.publish("ordered", {"i": i}, key=f"k{i % keys}")


def _drain(
    client: redis.Redis, n: int, keys: int, *, ordered: bool, wait_s: float, threads: int
) -> float:
    """Seconds an in-process worker takes to handle ``n`` messages over ``keys`` keys."""
    broker = Broker(client)
    _fill(client, broker, n, keys)

    def handler(message: Any) -> None:
        if wait_s:
            time.sleep(wait_s)

    spec = ConsumerSpec(
        "ordered", "c", handler, concurrency=threads, ordered=ordered, start="earliest"
    )
    options = WorkerOptions(burst=True, stats_interval=0, block_ms=50, elastic_threads=threads == 1)
    worker = Worker(broker, [spec], options)
    started = time.perf_counter()
    assert worker.run() == 0
    elapsed = time.perf_counter() - started
    assert worker.totals()["handled"] == n, worker.totals()
    return elapsed


def bench_ordered(client: redis.Redis, reps: int, log: Any) -> dict[str, list[float]]:
    """Wall seconds per variant and repetition (see the module's docstring)."""
    res: dict[str, list[float]] = {}
    for rep in range(reps):
        log(f"  ordered rep {rep + 1}/{reps}")
        pairs = [("cost_ordered", True), ("cost_unordered", False)]
        for name, ordered in pairs if rep % 2 == 0 else reversed(pairs):
            s = _drain(client, COST_N, COST_KEYS, ordered=ordered, wait_s=0, threads=1)
            res.setdefault(name, []).append(s)
        for keys in KEY_COUNTS:
            pairs = [(f"par{keys}_ordered", True), (f"par{keys}_unordered", False)]
            for name, ordered in pairs if rep % 2 == 0 else reversed(pairs):
                s = _drain(
                    client,
                    PARALLEL_N,
                    keys,
                    ordered=ordered,
                    wait_s=PARALLEL_WAIT_S,
                    threads=PARALLEL_THREADS,
                )
                res.setdefault(name, []).append(s)
    return res


def ordered_rows(res: dict[str, list[float]], median: Any, ratio_row: Any) -> list[dict]:
    """Rows of the results table: ordered as "ours", unordered as "raw" (throughput)."""
    rows = [
        ratio_row(
            f"ordered vs unordered, no-op, c=1, {COST_KEYS} keys ({COST_N} msgs)",
            COST_N / median(res["cost_ordered"]),
            COST_N / median(res["cost_unordered"]),
            "msg/s",
            None,
        )
    ]
    for keys in KEY_COUNTS:
        rows.append(
            ratio_row(
                f"ordered vs unordered, 2 ms I/O, c={PARALLEL_THREADS}, {keys} key(s)",
                PARALLEL_N / median(res[f"par{keys}_ordered"]),
                PARALLEL_N / median(res[f"par{keys}_unordered"]),
                "msg/s",
                None,
            )
        )
    return rows
