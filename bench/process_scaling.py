"""How ``runconsumer --processes N`` scales on no-op handlers, and what limits it
(issue 39, point 3).

Run with ``make bench-scaling`` (or ``.venv/bin/python bench/process_scaling.py``).
One private redis-server; for each repetition, ``--processes 1`` and ``--processes 2``
(and ``--processes 3`` with ``--max-processes 3``) drain the same backlog of no-op
messages back to back (``runconsumer bench --burst --concurrency 1``). For each run:

* **aggregate rate**: each worker process's messages over its own first->last span
  (the drain file the bench project's handler writes), summed over the processes: the
  rate while they all run, without the spread of their start-up times;
* **CPU per message**: the worker processes' user+system CPU (``RUSAGE_CHILDREN`` of
  this process, the supervisor's reaped children included) and redis-server's
  (``/proc/PID/stat``), less what the same command spends draining nothing (Django's
  start, the last empty fetch, the exit; measured beside each run), over the messages.

From the CPU per message it prints the ceiling two processes can reach on this
machine's cores, and a projection for 8 and 32 cores: N processes are held by the
smallest of N times one process's rate, the cores shared by the workers and a Redis
on the same host, and one Redis shard's single thread (``bench/RESULTS.md`` discusses
them). Writes ``bench/out/process_scaling.md`` and ``.json``; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import run as bench
from run import OUT, DjangoEnv, fill, log, median, redis_binary

from redisq_django.core import Broker
from tests.support.redis_server import RedisServer

#: Messages per drain: a no-op drain of one process lasts seconds, far longer than the
#: difference between two children's start-up times.
N = 100_000
TICK = os.sysconf("SC_CLK_TCK")


def _process_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def drain(denv: DjangoEnv, tmp: Path, redis_pid: int, processes: int, n: int) -> dict[str, float]:
    """One burst drain of the filled backlog of ``n`` with ``processes`` worker
    processes: the aggregate rate and the CPU seconds spent (workers, redis-server)."""
    for old in tmp.glob("drain-*.json"):
        old.unlink()
    args = ["runconsumer", "bench", "--burst", "--concurrency", "1"]
    if processes > 1:
        args += ["--processes", str(processes)]
    redis_before, workers_before = _process_cpu(redis_pid), _children_cpu()
    proc = denv.popen(*args, BENCH_DRAIN_OUT=str(tmp / "drain-{pid}.json"), BENCH_HISTORY="0")
    _, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"runconsumer exited {proc.returncode}: {err.decode()[-2000:]}")
    parts = [json.loads(f.read_text()) for f in tmp.glob("drain-*.json")]
    count = sum(p["count"] for p in parts)
    assert count == n, (count, n)
    return {
        "rate": sum(p["count"] / (p["last"] - p["first"]) for p in parts if p["count"] > 1),
        "worker_cpu": _children_cpu() - workers_before,
        "redis_cpu": _process_cpu(redis_pid) - redis_before,
    }


def per_message(run: dict[str, float], empty: dict[str, float], n: int) -> dict[str, float]:
    """``run``'s CPU per message (microseconds), less what the same processes spent on a
    drain of nothing (Django's start, the burst's last empty fetch, the exit)."""
    return {
        "rate": run["rate"],
        "worker_us": (run["worker_cpu"] - empty["worker_cpu"]) / n * 1e6,
        "redis_us": (run["redis_cpu"] - empty["redis_cpu"]) / n * 1e6,
    }


def projection(one: dict[str, float], cores: int) -> dict[str, float]:
    """Messages/s that N = cores processes could reach, by what bounds them."""
    worker_s, redis_s = one["worker_us"] / 1e6, one["redis_us"] / 1e6
    return {
        "linear": cores * one["rate"],
        # Workers and a Redis on the same host share the cores (no process gets more
        # than one: the GIL).
        "shared_cores": cores / (worker_s + redis_s),
        # One Redis shard runs commands on one thread.
        "one_shard": 1 / redis_s,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each pair (median)")
    ap.add_argument("--max-processes", type=int, default=2, choices=(2, 3, 4))
    ap.add_argument("--messages", type=int, default=N, help="messages per drain")
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    runs: dict[int, list[dict[str, float]]] = {}
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="redisq-scaling-") as tmpdir:
        tmp = Path(tmpdir)
        server = RedisServer(redis_binary(), tmp / "redis").start()
        try:
            client = server.client()
            broker = Broker(client)
            info = bench.machine(client)
            redis_pid = int(client.info("server")["process_id"])
            denv = DjangoEnv(server.url, tmp)
            denv.run("migrate", "-v", "0")
            for rep in range(args.reps):
                for processes in range(args.max_processes, 0, -1):
                    fill(client, broker, 0)
                    empty = drain(denv, tmp, redis_pid, processes, 0)
                    fill(client, broker, args.messages)
                    loads.append(os.getloadavg()[0])
                    run = drain(denv, tmp, redis_pid, processes, args.messages)
                    result = per_message(run, empty, args.messages)
                    runs.setdefault(processes, []).append(result)
                    log(
                        f"rep {rep + 1} processes={processes}: {result['rate']:,.0f} msg/s, "
                        f"worker {result['worker_us']:.1f} us/msg, "
                        f"redis {result['redis_us']:.1f} us/msg"
                    )
                    time.sleep(1)
        finally:
            server.stop()

    med = {
        p: {key: median([r[key] for r in rs]) for key in rs[0]} for p, rs in sorted(runs.items())
    }
    one = med[1]
    cores = os.cpu_count() or 1
    lines = [
        f"Machine: {info['cores']} cores, python {info['python']}, redis {info['redis']}; "
        f"load {min(loads):.1f}-{max(loads):.1f}; {args.messages:,} no-op messages per drain, "
        f"medians of {args.reps}.",
        "",
        "| processes | aggregate msg/s | vs N x one | worker CPU us/msg | redis CPU us/msg |",
        "|---|---|---|---|---|",
    ]
    for p, m in med.items():
        lines.append(
            f"| {p} | {m['rate']:,.0f} | {m['rate'] / (p * one['rate']):.2f}x | "
            f"{m['worker_us']:.1f} | {m['redis_us']:.1f} |"
        )
    lines += ["", "| cores = processes | N x one | cores shared with Redis | one Redis shard |"]
    lines.append("|---|---|---|---|")
    projected: dict[int, dict[str, float]] = {}
    for n in sorted({cores, 8, 32}):
        projected[n] = projection(one, n)
        row = projected[n]
        lines.append(
            f"| {n} | {row['linear']:,.0f} | {row['shared_cores']:,.0f} | {row['one_shard']:,.0f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    (OUT / "process_scaling.md").write_text(text)
    result: dict[str, Any] = {"machine": info, "loads": loads, "runs": runs, "medians": med}
    result["projection"] = projected
    (OUT / "process_scaling.json").write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
