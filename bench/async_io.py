"""I/O-bound handlers: ``async def`` consumers on the worker's event loop vs thread handlers.

1,000 messages whose handler waits 50 ms (``await asyncio.sleep`` / ``time.sleep``, the
stand-in for an HTTP call), drained by a burst :class:`Worker` in this process from a
private redis-server: async at 100 and 1,000 handlers in flight, threads at
``--concurrency`` 8 and 32. Reported per configuration (median of ``--repeat`` runs): the
time from the first handler's start to the last one's end, against the floor of
``ceil(1000 / in-flight) x 50 ms`` (the slowest batch, when all run together), and memory
per in-flight handler at the moment the most handlers run: the Python heap (tracemalloc)
and the process's RSS (from /proc), each in a fresh process of its own, over that
process's figure before the worker started, divided by the handlers in flight. With the
load average, as the machine is shared. Not part of ``make bench``: ``make bench-async``.

    .venv/bin/python bench/async_io.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH_DIR.parent), str(BENCH_DIR)]

from run import redis_binary  # noqa: E402

from redisq_django.core import Broker, ConsumerSpec, CoreConfig, Message  # noqa: E402
from redisq_django.core.worker import Worker, WorkerOptions  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

N = 1000
WAIT_S = 0.05
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    """This process's resident set size (bytes)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


@dataclass
class Probe:
    """What the handlers saw: first start, last end, the most in flight, and memory when
    the most were in flight."""

    now: int = 0
    most: int = 0
    first: float = math.inf
    last: float = 0.0
    heap_at_most: int = 0
    rss_at_most: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        with self.lock:
            self.first = min(self.first, time.perf_counter())
            self.now += 1
            if self.now > self.most:
                self.most = self.now
                if tracemalloc.is_tracing():
                    self.heap_at_most = tracemalloc.get_traced_memory()[0]
                self.rss_at_most = rss()

    def end(self) -> None:
        with self.lock:
            self.now -= 1
            self.last = max(self.last, time.perf_counter())


def handler_for(kind: str, probe: Probe) -> Callable[[Message], Any]:
    if kind == "async":

        async def io_async(message: Message) -> None:
            probe.start()
            try:
                await asyncio.sleep(WAIT_S)
            finally:
                probe.end()

        return io_async

    def io_thread(message: Message) -> None:
        probe.start()
        try:
            time.sleep(WAIT_S)
        finally:
            probe.end()

    return io_thread


def drain_on(client: Any, queue: str, kind: str, flight: int, heap: bool) -> Probe:
    broker = Broker(client, CoreConfig(poll_interval_ms=20))
    broker.publish_many(queue, [{"n": i} for i in range(N)])
    probe = Probe()
    spec = ConsumerSpec(queue, "io", handler_for(kind, probe), start="earliest", concurrency=flight)
    options = WorkerOptions(block_ms=50, burst=True, stats_interval=0, prefetch=100)
    worker = Worker(broker, [spec], options)
    if heap:
        tracemalloc.start()
    base_heap = tracemalloc.get_traced_memory()[0] if heap else 0
    base_rss = rss()
    try:
        assert worker.run() == 0
    finally:
        if heap:
            tracemalloc.stop()
        client.close()
    assert worker.totals()["handled"] == N, worker.totals()
    probe.heap_at_most -= base_heap
    probe.rss_at_most -= base_rss
    return probe


CONFIGS = [("async", 1000), ("async", 100), ("threads", 32), ("threads", 8)]


def memory(url: str, kind: str, flight: int) -> tuple[float, float]:
    """Heap and RSS per in-flight handler, each from a fresh process (an earlier run's
    freed pages would hide the RSS a run adds)."""
    out = []
    for heap in (False, True):
        argv = [sys.executable, __file__, "--memory", url, kind, str(flight)]
        if heap:
            argv.append("--heap")
        done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=300)
        most, heap_at_most, rss_at_most = json.loads(done.stdout.strip().splitlines()[-1])
        out.append((heap_at_most if heap else rss_at_most) / max(1, most))
    return out[1], out[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--memory", nargs=3, metavar=("URL", "KIND", "FLIGHT"))
    parser.add_argument("--heap", action="store_true")
    args = parser.parse_args()
    if args.memory:  # a child of memory(): one run, its figures as JSON
        import redis

        url, kind, flight = args.memory
        server_client = redis.Redis.from_url(url)
        probe = drain_on(server_client, f"io-mem-{os.getpid()}", kind, int(flight), args.heap)
        print(json.dumps([probe.most, probe.heap_at_most, probe.rss_at_most]))
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="redisq-async-bench-") as tmp:
        server = RedisServer(redis_binary(), Path(tmp)).start()
        try:
            for i, (kind, flight) in enumerate(CONFIGS):
                load = os.getloadavg()[0]
                times = []
                for r in range(args.repeat):
                    probe = drain_on(server.client(), f"io-{i}-{r}", kind, flight, heap=False)
                    times.append(probe.last - probe.first)
                heap_each, rss_each = memory(server.url, kind, flight)
                floor = math.ceil(N / flight) * WAIT_S
                rows.append(
                    (
                        f"{kind}, {flight} in flight",
                        statistics.median(times),
                        floor,
                        probe.most,
                        heap_each,
                        rss_each,
                        load,
                    )
                )
                print(f"done: {kind} {flight}: {times}", file=sys.stderr)
        finally:
            server.stop()
    print(f"{N} handlers each waiting {WAIT_S * 1000:.0f} ms, median of {args.repeat} runs")
    print()
    print(
        "| configuration | first start -> last end | floor (slowest batch) | ratio "
        "| most in flight | heap / in-flight handler | RSS / in-flight handler | load 1 min |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, took, floor, most, heap, rss_each, load in rows:
        print(
            f"| {name} | {took:.3f} s | {floor:.2f} s | {took / floor:.2f}x | {most} "
            f"| {heap / 1024:.1f} KiB | {rss_each / 1024:.1f} KiB | {load:.2f} |"
        )


if __name__ == "__main__":
    main()
