"""How late does Redis end an ``XREADGROUP ... BLOCK ms`` that times out?

The worker's fetch loop relies on that timeout to wake up for the next promote
(delayed messages, retries). This measures the overshoot on an otherwise idle private
redis-server, for a few BLOCK values and ``hz`` settings (not part of ``make bench``).

    .venv/bin/python bench/block_precision.py
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH_DIR.parent), str(BENCH_DIR)]

from run import pct, redis_binary  # noqa: E402

from tests.support.redis_server import RedisServer  # noqa: E402

BLOCKS = (1, 5, 10, 20, 30, 40, 50)
SAMPLES = 20


def measure(hz: int) -> None:
    with tempfile.TemporaryDirectory(prefix="redisq-block-") as tmp:
        server = RedisServer(redis_binary(), Path(tmp), extra_args=("--hz", str(hz))).start()
        try:
            client = server.client()
            client.xgroup_create("s", "g", "$", mkstream=True)
            rng = random.Random(1)
            print(f"hz={hz}: overshoot of BLOCK timeouts (ms), idle server")
            print("  BLOCK   p50    p90    max")
            for block in BLOCKS:
                over = []
                for _ in range(SAMPLES):
                    time.sleep(rng.uniform(0, 0.1))  # de-synchronise from serverCron
                    t = time.perf_counter()
                    client.execute_command(
                        "XREADGROUP", "GROUP", "g", "c", "COUNT", 1, "BLOCK", block,
                        "STREAMS", "s", ">",
                    )  # fmt: skip
                    over.append((time.perf_counter() - t) * 1000 - block)
                print(
                    f"  {block:5d} {statistics.median(over):6.1f} {pct(over, 90):6.1f} "
                    f"{max(over):6.1f}"
                )
        finally:
            server.stop()


if __name__ == "__main__":
    for hz in (10, 100):
        measure(hz)
