"""The fetch's cost of ending messages waiting in the log (``core/ended.py``): the drain
row of ``bench/run.py`` (20,000 no-op messages, ``runconsumer bench --burst`` c=1, first
to last handled) with the package of another commit (``--base``, default ``main``) vs
this tree, and this tree with one mark standing for the whole drain (its ``ended`` hash
exists: every read asks ``ended_marks.lua`` too); interleaved, in rotating order, on one
private redis-server. The same drains in a process of their own (an in-process
``Worker``), as CPU seconds: less sensitive to other jobs on shared cores. And the read
alone (``--reads``): 20,000 entries fetched 10 at a time by main's read (redis-py
``execute_command("XREADGROUP", …)``), by ours (``ended.LogReader``: the same
``XREADGROUP`` and an ``EXISTS`` in one write, hiredis-packed, on a pooled connection),
and by ours without the ``EXISTS`` (what the ``EXISTS`` itself costs).

Run: ``.venv/bin/python bench/end_marks.py [--reps 5] [--base main]``. Prints the
medians; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent

#: What the in-process child runs: ``tree`` first on sys.path, so that its
#: ``redisq_django`` is the one measured.
CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import redis
from redisq_django.core import Broker, ConsumerSpec
from redisq_django.core.worker import Worker, WorkerOptions
client = redis.Redis.from_url(sys.argv[2])
n, mark = int(sys.argv[3]), sys.argv[4] == "1"
client.flushdb()
broker = Broker(client)
broker.consumers.ensure("bench", "noop")
for i in range(0, n, 1000):
    broker.publish_many("bench", [{"i": j} for j in range(i, min(n, i + 1000))])
if mark:
    last = client.xrevrange(broker.keys("bench").log, count=1)[0][0]
    client.hset(broker.keys("bench").group("noop").ended, last, '{"mode":"delete"}')
spec = ConsumerSpec("bench", "noop", lambda m: None, start="earliest")
worker = Worker(broker, [spec], WorkerOptions(burst=True, stats_interval=0, block_ms=50))
cpu, wall = time.process_time(), time.perf_counter()
assert worker.run() == 0
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
print(json.dumps({"cpu": cpu, "wall": wall, "handled": worker.totals()["handled"]}))
"""


def bench_reads(url: str, reps: int, n: int = 20_000) -> None:
    """The read alone, three ways (see the module's docstring); medians printed."""
    import redis

    from redisq_django.core import Broker
    from redisq_django.core.ended import LogReader
    from redisq_django.core.groups import read_group
    from redisq_django.core.pipelining import packed

    client = redis.Redis.from_url(url)
    client.flushdb()
    broker = Broker(client)
    broker.consumers.ensure("bench", "noop")
    for i in range(0, n, 1000):
        broker.publish_many("bench", [{"i": j} for j in range(i, min(n, i + 1000))])
    gkeys = broker.keys("bench").group("noop")

    class WithoutExists(LogReader):
        def read(self, instance: str, count: int, block: int | None) -> tuple[object, bool]:
            assert self._pipe is not None
            args = ["XREADGROUP", "GROUP", "noop", instance, "COUNT", count, "STREAMS"]
            self._pipe.write(
                packed([*args, gkeys.queue_keys.log, gkeys.direct, ">", ">"]), ((None, None, b""),)
            )
            (reply,) = self._pipe.read_replies()
            self._pipe.release()
            return reply, False

    def main_read(instance: str, count: int, block: int | None) -> tuple[object, bool]:
        return read_group(client, broker.scripts, gkeys, instance, count, block), False

    ways = {
        "main's read": main_read,
        "ours (+EXISTS)": LogReader(client, broker.scripts, gkeys).read,
        "ours without EXISTS": WithoutExists(client, broker.scripts, gkeys).read,
    }
    res: dict[str, list[float]] = {}
    for rep in range(reps):
        names = list(ways)
        for name in names[rep % 3 :] + names[: rep % 3]:
            client.execute_command("XGROUP", "SETID", gkeys.queue_keys.log, "noop", "0")
            got, t = 0, time.perf_counter()
            while got < n:
                reply, _ = ways[name]("i1", 10, None)
                pairs = reply.items() if isinstance(reply, dict) else reply  # type: ignore[union-attr]
                got += sum(len(v) for _, v in pairs)  # type: ignore[union-attr]
            res.setdefault(name, []).append(time.perf_counter() - t)
    for name, values in res.items():
        med = statistics.median(values)
        print(f"read {name:20s} median {med:.3f} s = {med / (n / 10) * 1e6:.1f} us per read of 10")
    client.flushdb()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--base", default="main", help="the commit to compare with")
    ap.add_argument("--reads", action="store_true", help="only the read alone")
    args = ap.parse_args()
    sys.path[:0] = [str(REPO), str(BENCH_DIR)]
    from run import DRAIN_N, DjangoEnv, drain_runconsumer, fill, log, redis_binary

    from redisq_django.core import Broker
    from tests.support.redis_server import RedisServer

    with tempfile.TemporaryDirectory(prefix="redisq-bench-") as tmpdir:
        tmp = Path(tmpdir)
        base = tmp / "base"
        base.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", args.base, "redisq_django"],
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
        server = RedisServer(redis_binary(), tmp / "redis").start()
        try:
            client = server.client()
            broker = Broker(client)
            if args.reads:
                bench_reads(server.url, args.reps)
                return 0
            denv = DjangoEnv(server.url, tmp)
            denv.run("migrate", "-v", "0")
            variants = {"base": (base, False), "this": (REPO, False), "this+mark": (REPO, True)}
            res: dict[str, list[float]] = {}
            for rep in range(args.reps):
                names = list(variants)
                order = names[rep % 3 :] + names[: rep % 3]
                log(f"rep {rep + 1}/{args.reps}: {', '.join(order)}")
                for name in order:
                    tree, mark = variants[name]
                    fill(client, broker, DRAIN_N)
                    if mark:
                        last = client.xrevrange(broker.keys("bench").log, count=1)[0][0]
                        ended = broker.keys("bench").group("noop").ended
                        client.hset(ended, last, '{"mode":"delete"}')
                    _, span, count = drain_runconsumer(
                        denv, tmp, 1, tree=None if tree == REPO else tree
                    )
                    assert count == DRAIN_N - mark, (name, count)
                    res.setdefault(f"span {name}", []).append(span or 0.0)
                    child = subprocess.run(
                        [
                            sys.executable,
                            "-c",
                            CHILD,
                            str(tree),
                            server.url,
                            str(DRAIN_N),
                            str(int(mark)),
                        ],
                        capture_output=True,
                        check=True,
                        cwd=tmp,
                    )
                    got = json.loads(child.stdout)
                    assert got["handled"] == DRAIN_N - mark, (name, got)
                    res.setdefault(f"cpu {name}", []).append(got["cpu"])
                    time.sleep(0.2)
            for key, values in res.items():
                med = statistics.median(values)
                shown = " ".join(f"{v:.3f}" for v in values)
                print(f"{key:16s} median {med:.3f} s  ({DRAIN_N / med:,.0f} msg/s)  [{shown}]")
            for what in ("span", "cpu"):
                b = statistics.median(res[f"{what} base"])
                for name in ("this", "this+mark"):
                    t = statistics.median(res[f"{what} {name}"])
                    print(f"{what}: {name} / base = {t / b:.3f}")
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
