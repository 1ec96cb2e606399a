"""Peer benchmark: Celery, RQ, Dramatiq, Huey and our ``runconsumer`` on one harness.

Run with ``make bench-peers`` (it builds ``.venv-peers`` with the peers pinned in
``bench/peers/requirements.txt``; the project's venv never gets them), or::

    .venv/bin/python bench/peers/run.py --peers-python .venv-peers/bin/python \\
        [--jobs 20000] [--rounds 3] [--only "huey,ours c=1"]

One private ``redis-server`` on a free loopback port, ``FLUSHALL`` before each run. Every
row runs the same job (one ``INCR`` of a counter; a latency job also pushes ``now -
t0``) with its library's normal API and one worker process. Each run of a row:

* enqueue: the driver subprocess enqueues N jobs, one normal call each (jobs/s);
* drain: the worker starts; the harness polls the counter until it reaches the queue's
  length: wall (spawn to the last job) and first->last (the poll that saw the first job
  to the one that saw the last); Redis commands per job between the two, from ``INFO
  commandstats``, the harness's own polls and ``INFO`` taken out;
* latency: the worker now idle and waiting, the driver enqueues 200 jobs/s for 10 s;
  p50 and p99 of ``now - t0`` in the job.

Each worker logs at its default level but RQ and Huey, which log every job at INFO
by default (``--logging_level WARNING``, ``-q``): the rows measure the queue, not log
formatting. The rows and their command lines are in ``rows.py``.

Bulk enqueue (RQ's ``enqueue_many``, our ``publish_many``) runs as rows of its own. Every
round runs every row once in a freshly shuffled order (``--seed``); the table gives the
median and the min-max over the rounds, each figure with the median 1-minute load
average when it was taken, and per round our ``c=1`` drain over the fastest peer's.
Nothing is asserted. Output: stdout, ``bench/out/peers.md`` and ``bench/out/peers.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PEERS_DIR = Path(__file__).resolve().parent
BENCH_DIR = PEERS_DIR.parent
REPO = BENCH_DIR.parent
sys.path[:0] = [str(REPO), str(PEERS_DIR)]

from common import COUNTER, LATENCY  # noqa: E402
from harness import command_calls, command_delta, interleaved, percentile  # noqa: E402
from report import machine, peer_versions, report  # noqa: E402
from rows import ROWS, Row  # noqa: E402

from tests.support.redis_server import RedisServer, find_redis_server  # noqa: E402

OUT = BENCH_DIR / "out"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load1() -> float:
    return os.getloadavg()[0]


class Harness:
    """The private server, the two interpreters and how to run a row."""

    def __init__(self, args: argparse.Namespace, server: RedisServer, tmp: Path) -> None:
        self.args = args
        self.server = server
        self.tmp = tmp
        self.conn = server.client()
        self.peers_python = str(Path(args.peers_python).absolute())
        base = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        base["PEERS_REDIS_URL"] = server.url
        self.peers_env = {**base, "PYTHONPATH": str(PEERS_DIR)}
        self.ours_env = {
            **base,
            "PYTHONPATH": os.pathsep.join([str(PEERS_DIR), str(REPO)]),
            "PEERS_DB": str(tmp / "peers.sqlite3"),
        }

    def env(self, row: Row) -> dict[str, str]:
        return self.ours_env if row.ours else self.peers_env

    def python(self, row: Row) -> str:
        return sys.executable if row.ours else self.peers_python

    def driver(self, row: Row, *argv: str) -> dict[str, Any]:
        cmd = [self.python(row), str(PEERS_DIR / "common.py"), row.module, *argv]
        done = subprocess.run(
            cmd, env=self.env(row), cwd=self.tmp, capture_output=True, timeout=900, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{row.key}: the driver {' '.join(argv)} exited {done.returncode}:\n"
                f"{done.stderr.decode(errors='replace')[-3000:]}"
            )
        result: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
        return result

    def worker_argv(self, row: Row) -> list[str]:
        fill = {
            "bin": str(Path(self.peers_python).parent),
            "py": sys.executable,
            "url": self.server.url,
            "dir": str(PEERS_DIR),
        }
        return [part.format(**fill) for part in row.worker]

    def counter(self) -> int:
        return int(self.conn.get(COUNTER) or 0)

    def run(self, row: Row, rnd: int) -> dict[str, Any]:
        """One run of ``row``: enqueue, drain and latency (or the bulk enqueue)."""
        self.conn.flushall()
        n = min(self.args.jobs, row.max_jobs or self.args.jobs)
        out: dict[str, Any] = {"key": row.key, "round": rnd, "n": n}
        if row.bulk:
            res = self.driver(row, "bulk", "--n", str(n))
            out["bulk_rate"] = n / res["seconds"]
            out["bulk_load"] = load1()
            return out
        res = self.driver(row, "enqueue", "--n", str(n))
        out["enqueue_rate"] = n / res["seconds"]
        out["enqueue_load"] = load1()
        queued = int(res["queued"])
        logfile = self.tmp / f"worker-{row.key.replace(' ', '_')}-{rnd}.log"
        before = command_calls(self.conn.info("commandstats"))
        with logfile.open("wb") as sink:
            spawned = time.perf_counter()
            proc = subprocess.Popen(
                self.worker_argv(row),
                env=self.env(row),
                cwd=self.tmp,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: stopped whole, children included
            )
            try:
                out.update(self._drain(row, proc, logfile, queued, spawned, before))
                out.update(self._latency(row, proc, logfile))
            finally:
                stop(proc)
        return out

    def _drain(
        self,
        row: Row,
        proc: subprocess.Popen[bytes],
        logfile: Path,
        queued: int,
        spawned: float,
        before: dict[str, int],
    ) -> dict[str, Any]:
        polls, first, first_count = 0, None, 0
        deadline = spawned + self.args.timeout
        pause = self.args.poll_ms / 1000.0
        while True:
            count = self.counter()
            polls += 1
            now = time.perf_counter()
            if count and first is None:
                first, first_count = now, count
            if count >= queued:
                last = now
                break
            if proc.poll() is not None or now > deadline:
                what = "timed out" if proc.poll() is None else f"exited {proc.returncode}"
                raise RuntimeError(
                    f"{row.key}: {count}/{queued} jobs done when the worker {what}; "
                    f"its log:\n{tail(logfile)}"
                )
            time.sleep(pause)
        after = command_calls(self.conn.info("commandstats"))
        # Ours: the polls (GET) and the INFO that took ``before`` (counted once it ran).
        others = command_delta(before, after, {"get": polls, "info": 1})
        assert first is not None
        span = last - first
        return {
            "drain_wall_rate": queued / (last - spawned),
            "drain_span_rate": (queued - first_count) / span if span > 0 else None,
            "drain_load": load1(),
            "startup_s": first - spawned,
            "commands_per_job": sum(others.values()) / queued,
            "commands": {k: v / queued for k, v in sorted(others.items(), key=lambda kv: -kv[1])},
        }

    def _latency(self, row: Row, proc: subprocess.Popen[bytes], logfile: Path) -> dict[str, Any]:
        time.sleep(1.0)  # the worker idle and waiting
        self.conn.delete(LATENCY)
        res = self.driver(
            row, "latency", "--rate", str(self.args.rate), "--seconds", str(self.args.seconds)
        )
        deadline = time.monotonic() + 30
        while self.conn.llen(LATENCY) < res["n"] and time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{row.key}: the worker exited; its log:\n{tail(logfile)}")
            time.sleep(0.05)
        waits = [float(v) * 1000.0 for v in self.conn.lrange(LATENCY, 0, -1)]
        if len(waits) < res["n"]:
            log(f"  {row.key}: only {len(waits)}/{res['n']} latency jobs ran within 30 s")
        return {
            "latency_p50": percentile(waits, 50) if waits else None,
            "latency_p99": percentile(waits, 99) if waits else None,
            "latency_n": len(waits),
            "latency_sent": res["n"],
            "latency_load": load1(),
        }


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the worker (each library's warm shutdown), then SIGKILL to whatever is
    left of its process group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(20)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers-python", required=True, help="the peers' venv's python")
    ap.add_argument("--jobs", type=int, default=20_000, help="jobs per drain (default 20,000)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=None, help="shuffle seed (default: random)")
    ap.add_argument("--rate", type=float, default=200.0, help="latency jobs per second")
    ap.add_argument("--seconds", type=float, default=10.0, help="latency run length")
    ap.add_argument("--poll-ms", type=float, default=5.0, help="counter poll interval")
    ap.add_argument("--timeout", type=float, default=600.0, help="per drain, seconds")
    ap.add_argument("--only", default="", help="comma-separated row keys (default: all)")
    args = ap.parse_args()
    rows = ROWS
    if args.only:
        wanted = {k.strip() for k in args.only.split(",")}
        unknown = wanted - {r.key for r in ROWS}
        if unknown:
            ap.error(f"unknown rows {sorted(unknown)}; the rows: {[r.key for r in ROWS]}")
        rows = [r for r in ROWS if r.key in wanted]
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(2), "big")
    binary = os.environ.get("REDISQ_TEST_REDIS_SERVER") or find_redis_server()
    if not binary:
        sys.exit("bench-peers: no redis-server (set REDISQ_TEST_REDIS_SERVER or run make redis)")
    versions = peer_versions(args.peers_python)
    with tempfile.TemporaryDirectory(prefix="redisq-peers-") as tmpdir:
        tmp = Path(tmpdir)
        server = RedisServer(binary, tmp / "redis").start()
        try:
            harness = Harness(args, server, tmp)
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "django",
                    "migrate",
                    "-v",
                    "0",
                    "--settings",
                    "peersproject",
                ],
                env=harness.ours_env,
                cwd=tmp,
                check=True,
            )
            meta = {
                **machine(harness.conn),
                "rounds": args.rounds,
                "seed": seed,
                "jobs": args.jobs,
                "rate": args.rate,
                "seconds": args.seconds,
                "versions": versions,
                "versions_text": ", ".join(f"{k} {v}" for k, v in versions.items()),
            }
            order = interleaved([r.key for r in rows], args.rounds, seed)
            by_key = {r.key: r for r in rows}
            results = []
            for rnd, keys in enumerate(order, 1):
                for key in keys:
                    log(f"round {rnd}/{args.rounds}: {key} (load {load1():.1f})")
                    try:
                        results.append(harness.run(by_key[key], rnd))
                    except (RuntimeError, subprocess.SubprocessError) as exc:
                        # One row failing (a peer's worker dying, a timeout) should not
                        # throw away the others' runs: it is reported, the round goes on.
                        log(f"  {key} failed: {exc}")
                        results.append({"key": key, "round": rnd, "error": str(exc)})
        finally:
            server.stop()
    text = report(results, rows, meta)
    print(text)
    OUT.mkdir(exist_ok=True)
    (OUT / "peers.md").write_text(text)
    (OUT / "peers.json").write_text(
        json.dumps({"meta": meta, "order": order, "runs": results}, indent=2) + "\n"
    )
    log(f"written: {OUT / 'peers.md'}, {OUT / 'peers.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
