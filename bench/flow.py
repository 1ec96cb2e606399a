"""Flow control's cost and precision, in the same run (issue 34, point 7).

Each measure is an in-process ``Worker`` draining a queue filled beforehand, wall time:

* **cost**: 20,000 no-op messages, one handler thread, with no limit declared vs a rate
  far above the drain rate (``100000/s``, bursts of 1,000) and vs ``max_in_flight`` far
  above the threads (1,000): the Redis calls a limit adds (a token per fetch, a slot
  per batch), the baseline being the same code path with no limit (which makes no call);
* **precision**: 8 fixed handler threads against a declared rate of 10, 100 and 1,000
  per second for about 3 s each (burst 1): the achieved rate (messages after the first,
  over the time from the first start to the last) over the declared one.

Run alone: ``.venv/bin/python bench/run.py --only flow``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import redis

from redisq_django.core import Broker, ConsumerSpec
from redisq_django.core.limits import Rate
from redisq_django.core.worker import Worker, WorkerOptions

COST_N = 20_000
PRECISION_RATES = (10, 100, 1_000)
PRECISION_S = 3.0


def _fill(client: redis.Redis, broker: Broker, n: int) -> None:
    client.flushdb()
    broker._registered.clear()
    broker.consumers.ensure("flow", "c")
    for start in range(0, n, 1000):
        broker.publish_many("flow", range(start, min(n, start + 1000)))


def _drain(client: redis.Redis, n: int, **limits: Any) -> float:
    """Seconds an in-process worker (one thread) takes to drain ``n`` no-op messages."""
    broker = Broker(client)
    _fill(client, broker, n)
    spec = ConsumerSpec("flow", "c", lambda m: None, start="earliest", **limits)
    worker = Worker(broker, [spec], WorkerOptions(burst=True, stats_interval=0, block_ms=50))
    began = time.perf_counter()
    assert worker.run() == 0
    elapsed = time.perf_counter() - began
    assert worker.totals()["handled"] == n, worker.totals()
    return elapsed


def _precision(client: redis.Redis, per_second: int) -> float:
    """Achieved rate over declared, 8 threads, about :data:`PRECISION_S` seconds."""
    broker = Broker(client)
    n = int(per_second * PRECISION_S) + 1
    _fill(client, broker, n)
    starts: list[float] = []
    lock = threading.Lock()

    def handler(message: Any) -> None:
        with lock:
            starts.append(time.perf_counter())

    spec = ConsumerSpec(
        "flow", "c", handler, start="earliest", concurrency=8, rate=Rate.parse(f"{per_second}/s", 1)
    )
    options = WorkerOptions(burst=True, stats_interval=0, block_ms=50, elastic_threads=False)
    assert Worker(broker, [spec], options).run() == 0
    assert len(starts) == n
    starts.sort()
    return (n - 1) / (starts[-1] - starts[0]) / per_second


def bench_flow(client: redis.Redis, reps: int, log: Any) -> dict[str, list[float]]:
    res: dict[str, list[float]] = {}
    variants: dict[str, dict[str, Any]] = {
        "none": {},
        "rate": {"rate": Rate.parse("100000/s", 1000)},
        "slots": {"max_in_flight": 1000},
    }
    for rep in range(reps):
        log(f"  flow rep {rep + 1}/{reps}")
        order = list(variants) if rep % 2 == 0 else list(reversed(variants))
        for name in order:
            res.setdefault(f"cost_{name}", []).append(_drain(client, COST_N, **variants[name]))
    for per_second in PRECISION_RATES:
        log(f"  precision at {per_second}/s")
        res[f"precision_{per_second}"] = [_precision(client, per_second) for _ in range(reps)]
    return res


def flow_rows(res: dict[str, list[float]], median: Any, row: Any, ratio_row: Any) -> list[dict]:
    """Rows of the results table: a limit's drain as "ours", no limit as "raw"
    (throughput); the precision as achieved/declared."""
    rows = [
        ratio_row(
            f"drain {COST_N // 1000}k, c=1, rate 100000/s (far above) vs no limit",
            COST_N / median(res["cost_rate"]),
            COST_N / median(res["cost_none"]),
            "msg/s",
            None,
        ),
        ratio_row(
            f"drain {COST_N // 1000}k, c=1, max_in_flight 1000 vs no limit",
            COST_N / median(res["cost_slots"]),
            COST_N / median(res["cost_none"]),
            "msg/s",
            None,
        ),
    ]
    for per_second in PRECISION_RATES:
        achieved = median(res[f"precision_{per_second}"])
        rows.append(
            row(
                f"rate {per_second}/s (burst 1), c=8: achieved / declared",
                f"{achieved * per_second:.1f}/s",
                f"{per_second}/s",
                f"{achieved:.3f}",
                "0.95-1.0",
                "yes" if 0.95 <= achieved <= 1.0 + 1 / (PRECISION_S * per_second) else "no",
            )
        )
    return rows
