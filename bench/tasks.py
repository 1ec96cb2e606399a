"""Benchmark of the redisq Django Tasks backend against django-tasks-db, same machine,
same run: enqueue and drain of a no-op task.

Run with ``make bench-tasks`` (it installs django-tasks-db from PyPI into the venv: the
benchmark's only user of it). One private redis-server and one on-disk SQLite file in a
temporary directory. For each backend and each of ``--reps`` repetitions:

The database is a private PostgreSQL cluster (django-tasks-db's production database)
when Debian's ``postgresql`` is installed (``make bench-tasks`` installs it), else SQLite.

* enqueue: ``task.enqueue()`` of N no-op tasks in this process, one call each (tasks/s);
* drain: N / (the last task's ``finished_at`` - the first one's ``started_at``), from
  the results both backends record, the worker running as a subprocess; and, as
  "drain (worker)", N / (the worker's spawn-to-exit minus the same worker's
  spawn-to-exit on an empty queue, measured in the same rep). The workers:
  ``runconsumer --tasks bench --burst`` vs ``db_worker --batch --queue-name bench
  --backend db --no-startup-delay --interval 0``.

Prints medians and the ratios (target: drain >= 10x django-tasks-db's); nothing is
asserted. Results are discussed in bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path[:0] = [str(REPO), str(BENCH_DIR)]

from tests.support.postgres_server import PostgresServer, find_pg_bin  # noqa: E402
from tests.support.redis_server import RedisServer, find_redis_server  # noqa: E402


def _env(redis_url: str, db: Path, pg: PostgresServer | None) -> dict[str, str]:
    extra = {}
    if pg is not None:
        conf = pg.django_settings()
        extra = {f"BENCH_PG_{k}": str(conf[k]) for k in ("HOST", "PORT", "USER")}
    return dict(
        os.environ,
        **extra,
        DJANGO_SETTINGS_MODULE="taskbench.settings",
        BENCH_REDIS_URL=redis_url,
        BENCH_DB=str(db),
        PYTHONPATH=os.pathsep.join([str(BENCH_DIR), str(REPO)]),
    )


def _timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True, timeout=900)
    return time.perf_counter() - started


def _first_to_last(results: list[Any]) -> float:
    """Seconds from the first task's start to the last one's end, from their results
    (both backends record them): the drain without the worker's start-up."""
    for r in results:
        r.refresh()
    assert all(r.status == "SUCCESSFUL" for r in results), "a task did not succeed"
    first = min(r.started_at for r in results)
    last = max(r.finished_at for r in results)
    return max(1e-3, (last - first).total_seconds())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5000, help="tasks per measurement")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--sqlite", action="store_true", help="SQLite even when PostgreSQL is available"
    )
    args = parser.parse_args()
    # SIGTERM (a stopped make) still stops the servers started here (finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    binary = find_redis_server()
    if binary is None:
        sys.exit("no redis-server (run `make bench-tasks`)")
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(binary, Path(tmp) / "redis")
        server.start()
        pg_bin = find_pg_bin()
        pg = PostgresServer(pg_bin).start() if pg_bin and not args.sqlite else None
        print(f"database: {'PostgreSQL' if pg else 'SQLite'}", flush=True)
        try:
            run(_env(server.url, Path(tmp) / "bench.db", pg), args.tasks, args.reps)
        finally:
            server.stop()
            if pg is not None:
                pg.stop()


def run(env: dict[str, str], n: int, reps: int) -> None:
    os.environ.update(env)
    py = sys.executable
    subprocess.run([py, "-m", "django", "migrate", "-v", "0"], env=env, check=True)
    import django

    django.setup()
    from taskbench.tasks import noop_db, noop_redisq

    workers = {
        "redisq": [
            py,
            "-m",
            "django",
            "runconsumer",
            "--tasks",
            "bench",
            "--burst",
            "--stats-interval",
            "0",
        ],
        "django-tasks-db": [
            py,
            "-m",
            "django",
            "db_worker",
            "--batch",
            "--queue-name",
            "bench",
            "--backend",
            "db",
            "--no-startup-delay",
            "--interval",
            "0",
        ],
    }
    tasks = {"redisq": noop_redisq, "django-tasks-db": noop_db}
    rows = ("enqueue", "drain", "drain (worker)")
    figures: dict[str, dict[str, list[float]]] = {k: {r: [] for r in rows} for k in tasks}
    for rep in range(reps):
        for name, task in tasks.items():
            idle = _timed(workers[name], env)  # start-up and shut-down on an empty queue
            started = time.perf_counter()
            results = [task.enqueue() for _ in range(n)]
            figures[name]["enqueue"].append(n / (time.perf_counter() - started))
            busy = _timed(workers[name], env)
            figures[name]["drain (worker)"].append(n / max(1e-6, busy - idle))
            first_to_last = _first_to_last(results)
            figures[name]["drain"].append(n / first_to_last)
            print(
                f"rep {rep + 1} {name}: enqueue {figures[name]['enqueue'][-1]:.0f}/s, "
                f"drain {figures[name]['drain'][-1]:.0f}/s first->last "
                f"({first_to_last:.2f}s; worker {busy:.2f}s, idle {idle:.2f}s)",
                flush=True,
            )
    print(f"\n{n} no-op tasks, median of {reps} reps (tasks/s)")
    print(f"{'':18}{'redisq':>10}{'tasks-db':>10}{'ratio':>8}  target")
    for what, target in (("enqueue", None), ("drain", 10.0), ("drain (worker)", None)):
        ours = statistics.median(figures["redisq"][what])
        theirs = statistics.median(figures["django-tasks-db"][what])
        goal = (
            f">= {target:.0f}x {'met' if ours / theirs >= target else 'NOT met'}" if target else ""
        )
        print(f"{what:18}{ours:>10.0f}{theirs:>10.0f}{ours / theirs:>7.1f}x  {goal}")


if __name__ == "__main__":
    main()
