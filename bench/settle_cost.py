"""What one settle costs, per message: the worker's per-message acknowledgement (the ack
pipe: a plain ``XACK``, or ``ack.lua`` prepacked for a direct entry or with history on),
an acknowledgement of ten at once, an ordered consumer's, and ``Subscription.fail``
(a retry, a dead letter), on a private redis-server. Three figures per message: wall
µs, our process's CPU µs (``time.process_time``) and Redis's (``INFO cpu``: the
the server process's CPU time) — the two CPU figures stay readable on a busy machine,
where wall time does not.

``--ab TREE``: the same measurements of this checkout and of another tree of the package
(a ``git archive`` of an older commit), alternating, ``--rounds`` times each: the medians
side by side, for a before/after on a busy machine (bench/RESULTS.md, issue 33).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.append(str(BENCH_DIR.parent))  # after PYTHONPATH: a tree given there wins

import redisq_django  # noqa: E402
from redisq_django.core import Broker, CoreConfig, RetryPolicy  # noqa: E402
from redisq_django.core.worker.acks import AckPipe  # noqa: E402
from tests.support.redis_server import RedisServer, find_redis_server  # noqa: E402

CASES = (
    "ack log, history off (XACK)",
    "ack log, history on",
    "ack direct, history off",
    "ack 10 at once, history on",
    "ack ordered",
    "fail: retry",
    "fail: dead letter",
)


def _fetch(sub: Any, n: int) -> list[Any]:
    got: list[Any] = []
    for _ in range(10_000):  # bounded
        got += sub.fetch(count=500, block_ms=100)
        if len(got) >= n:
            return got
    raise RuntimeError(f"fetched {len(got)} of {n}")


def _deliveries(broker: Broker, queue: str, n: int, *, direct: bool, ordered: bool) -> Any:
    broker.consumers.ensure(queue, "billing")
    if ordered:
        broker.publish_many(queue, [{"n": i} for i in range(n)], key=None)
    else:
        broker.publish_many(queue, [{"n": i} for i in range(n)])
    sub = broker.subscribe(queue, "billing", "i1", ordered=ordered)
    got = _fetch(sub, n)
    if direct:  # handed back, promoted into the direct stream, fetched again
        sub.release(got)
        got = _fetch(sub, n)
    return sub, got


def _redis_us(client: Any) -> float:
    """The CPU time the redis-server process used so far, µs (``INFO cpu``: user and
    system; time it waited for a core is not in it)."""
    cpu = client.info("cpu")
    return (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6


def measure(n: int) -> dict[str, list[float]]:
    """``[wall, our CPU, Redis's CPU]`` µs per message of each case, once."""
    out: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="redisq-settle-") as tmp:
        server = RedisServer(find_redis_server(), Path(tmp)).start()
        try:
            client = server.client()
            for case in CASES:
                history = "history on" in case
                broker = Broker(client, CoreConfig(history=history, poll_interval_ms=20))
                queue = f"cost-{CASES.index(case)}"
                sub, got = _deliveries(
                    broker, queue, n, direct="direct" in case, ordered="ordered" in case
                )
                redis_before = _redis_us(client)
                cpu = time.process_time()
                if case.startswith("fail"):
                    sub.policy = RetryPolicy(max_retries=0 if "dead" in case else 5)
                    error = ValueError("x")
                    start = time.perf_counter()
                    for d in got:
                        sub.fail(d, error)
                else:
                    pipe = AckPipe(sub, lambda acked: None)
                    size = 10 if "10 at once" in case else 1
                    start = time.perf_counter()
                    for i in range(0, len(got), size):
                        for d in got[i : i + size]:
                            pipe.add(d)
                        pipe.send()
                    pipe.flush()
                    pipe.close()
                wall = (time.perf_counter() - start) / n * 1e6
                cpu = (time.process_time() - cpu) / n * 1e6
                redis_cpu = (_redis_us(client) - redis_before) / n
                out[case] = [wall, cpu, redis_cpu]
                sub.leave()
        finally:
            server.stop()
    return out


def ab(other: Path, rounds: int, n: int) -> None:
    """This tree and ``other``, alternating; the medians."""
    results: dict[str, list[dict[str, list[float]]]] = {"this": [], "other": []}
    for round_ in range(rounds):
        order = (("other", other), ("this", None))
        for side, path in order if round_ % 2 else order[::-1]:  # neither always first
            env = dict(os.environ)
            if path is not None:
                env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
            done = subprocess.run(
                [sys.executable, __file__, "--n", str(n), "--json"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            results[side].append(json.loads(done.stdout))
    # The least of the runs estimates what a settle costs when nothing else takes the
    # cores meanwhile (others only ever add to it); the median shows the spread.
    print(f"µs per message, {rounds} alternating runs of {n} messages each, least (median):")
    print("| case | figure | other tree | this tree | this/other |")
    print("|---|---|---|---|---|")
    for case in CASES:
        for i, figure in enumerate(("wall", "our CPU", "Redis CPU")):
            before = [r[case][i] for r in results["other"]]
            after = [r[case][i] for r in results["this"]]
            ratio = min(after) / min(before) if min(before) else float("nan")
            print(
                f"| {case} | {figure} | {min(before):.1f} ({statistics.median(before):.1f}) "
                f"| {min(after):.1f} ({statistics.median(after):.1f}) | {ratio:.2f} |"
            )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="messages per case")
    ap.add_argument("--json", action="store_true", help="one JSON object (for --ab)")
    ap.add_argument("--ab", type=Path, help="another tree of the package to compare with")
    ap.add_argument("--rounds", type=int, default=5, help="alternations of --ab")
    args = ap.parse_args()
    if args.ab:
        ab(args.ab, args.rounds, args.n)
        return 0
    found = measure(args.n)
    if args.json:
        print(json.dumps(found))
    else:
        print(f"package: {Path(redisq_django.__file__).parent}")
        for case, (wall, cpu, redis_cpu) in found.items():
            print(f"{case}: {wall:.0f} µs wall, {cpu:.1f} µs ours, {redis_cpu:.1f} µs Redis")
    return 0


if __name__ == "__main__":
    sys.exit(main())
