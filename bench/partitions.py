"""One queue with K = 1, 2, 4, 8 partitions on a private 3-master Redis Cluster (issue 25).

For each K, on a flushed cluster with its command statistics reset: 20,000 messages with
ordering keys (1,000 distinct) published one by one, then drained by 2 worker processes
(an in-process ``Worker`` each, burst mode, one thread per partition and process). Reported:

* Redis commands per message, summed over the nodes (``INFO commandstats``; the
  benchmark's own ``INFO``/``CONFIG``/``CLUSTER`` calls left out): what a partition costs;
* each master's share of those commands: how the load spreads;
* the drain's throughput with the 2 processes (wall time, spawn to exit).

On 2 cores the three masters, the two workers and this process share the same cores, so
the throughput column cannot show the spread's gain; the per-master shares are what
carries over to a cluster of N masters on N machines (see bench/RESULTS.md).

Run: ``.venv/bin/python bench/partitions.py`` (about a minute).
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path[:0] = [str(REPO)]

from redisq_django.core import Broker, ConsumerSpec, CoreConfig  # noqa: E402
from redisq_django.core.worker import Worker, WorkerOptions  # noqa: E402
from tests.support.redis_server import (  # noqa: E402
    RedisClusterHandle,
    find_redis_server,
    start_cluster,
)

N, KEYS, PROCESSES = 20_000, 1_000, 2
KS = (1, 2, 4, 8)
QUEUE = "bench"
OWN = {"info", "config", "cluster", "command", "flushall", "ping", "hello", "client"}


def _config(k: int) -> CoreConfig:
    return CoreConfig(partitions={QUEUE: k} if k > 1 else {}, poll_interval_ms=50)


def _drain(nodes: list[tuple[str, int]], k: int, out: Any) -> None:
    """A worker process: drain the queue in burst mode, report how many it handled."""
    client = _client(nodes)
    broker = Broker(client, _config(k))
    spec = ConsumerSpec(QUEUE, "c", lambda m: None, start="earliest")
    worker = Worker(broker, [spec], WorkerOptions(burst=True, stats_interval=0, block_ms=100))
    worker.run()
    out.put(worker.totals()["handled"])


def _client(nodes: list[tuple[str, int]]) -> Any:
    from redis.cluster import ClusterNode, RedisCluster

    return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in nodes])


def _calls(cluster: RedisClusterHandle) -> list[int]:
    """Commands each node ran since its statistics were reset (ours left out)."""
    counts = []
    for node in cluster.nodes:
        with node.client() as conn:
            stats = conn.info("commandstats")
        counts.append(
            sum(
                v["calls"]
                for name, v in stats.items()
                if name.removeprefix("cmdstat_").split("|")[0] not in OWN
            )
        )
    return counts


def run_k(cluster: RedisClusterHandle, k: int) -> dict[str, Any]:
    cluster.flushall()
    for node in cluster.nodes:
        with node.client() as conn:
            conn.config_resetstat()
    client = _client(cluster.startup_nodes)
    broker = Broker(client, _config(k))
    broker.consumers.ensure(QUEUE, "c", start="earliest")
    started = time.perf_counter()
    for i in range(N):
        broker.publish(QUEUE, {"i": i}, key=f"k{i % KEYS}")
    publish_s = time.perf_counter() - started
    after_publish = _calls(cluster)
    out: Any = multiprocessing.Queue()
    procs = [
        multiprocessing.Process(target=_drain, args=(cluster.startup_nodes, k, out))
        for _ in range(PROCESSES)
    ]
    started = time.perf_counter()
    for p in procs:
        p.start()
    handled = sum(out.get(timeout=600) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    drain_s = time.perf_counter() - started
    total = _calls(cluster)
    client.close()
    assert handled >= N, f"K={k}: handled {handled} of {N}"
    consume = [t - p for t, p in zip(total, after_publish, strict=True)]
    return {
        "k": k,
        "publish_per_msg": sum(after_publish) / N,
        "consume_per_msg": sum(consume) / N,
        "shares": [c / sum(total) for c in total],
        "publish_msg_s": N / publish_s,
        "drain_msg_s": N / drain_s,
        "handled": handled,
    }


def bench_partitions() -> list[dict[str, Any]]:
    """One result per K (see the module's docstring), on a cluster of its own."""
    with tempfile.TemporaryDirectory(prefix="redisq-bench-parts-") as tmp:
        server = find_redis_server()
        if server is None:
            raise RuntimeError("no redis-server found: install it (make test does)")
        cli = str(Path(server).with_name("redis-cli"))
        cluster = start_cluster(server, cli, tmp)
        try:
            return [run_k(cluster, k) for k in KS]
        finally:
            cluster.stop()


def partition_rows(results: list[dict[str, Any]], row: Any) -> list[dict[str, Any]]:
    """Rows of ``bench/run.py``'s table: each K against K=1 (drain throughput)."""
    base = results[0]
    out = []
    for r in results:
        shares = "/".join(f"{s:.0%}" for s in r["shares"])
        out.append(
            row(
                f"partitions K={r['k']}: cmds/msg {r['publish_per_msg']:.2f}+"
                f"{r['consume_per_msg']:.2f}, masters {shares}",
                f"{r['drain_msg_s']:,.0f} msg/s",
                f"{base['drain_msg_s']:,.0f} msg/s",
                f"{r['drain_msg_s'] / base['drain_msg_s']:.2f}x",
                "(info: vs K=1)",
                "",
            )
        )
    return out


def main() -> int:
    rows = bench_partitions()
    print(
        "| K | commands/msg publish | commands/msg consume | share per master "
        "| publish msg/s | drain msg/s (2 processes) |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        shares = " / ".join(f"{s:.0%}" for s in r["shares"])
        print(
            f"| {r['k']} | {r['publish_per_msg']:.2f} | {r['consume_per_msg']:.2f} | {shares} "
            f"| {r['publish_msg_s']:,.0f} | {r['drain_msg_s']:,.0f} |"
        )
    out = BENCH_DIR / "out"
    out.mkdir(exist_ok=True)
    (out / "partitions.json").write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
