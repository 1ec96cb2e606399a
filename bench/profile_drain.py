"""Profile where a drain spends its time (not part of ``make bench``).

Builds the worker exactly as ``manage.py runconsumer bench --burst`` does
(``redisq_django.runner.build_worker``, with the Django database middleware), but in
this process, and runs each handler thread under cProfile. Prints the top functions
and writes ``bench/out/drain-<prefetch>-<concurrency>.pstats``.

    .venv/bin/python bench/profile_drain.py --prefetch 10
    .venv/bin/python bench/profile_drain.py --prefetch 100 --sort cumulative
    .venv/bin/python bench/profile_drain.py --prefetch 100 --history   # what history adds
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path[:0] = [str(REPO), str(BENCH_DIR)]

from run import DRAIN_N, OUT, fill, redis_binary  # noqa: E402

from tests.support.redis_server import RedisServer  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefetch", type=int, default=10)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--sort", default="tottime")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--no-profile", action="store_true", help="time only")
    ap.add_argument("--history", action="store_true", help="REDISQ['HISTORY'] on")
    args = ap.parse_args()
    if args.concurrency > 1 and not args.no_profile:
        # Python >= 3.12: one cProfile per process (sys.monitoring), not one per thread.
        ap.error("cProfile can profile one handler thread only: use py-spy for --concurrency > 1")
    OUT.mkdir(exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="redisq-prof-") as tmpdir:
        tmp = Path(tmpdir)
        server = RedisServer(redis_binary(), tmp / "redis").start()
        try:
            os.environ["BENCH_REDIS_URL"] = server.url
            os.environ["BENCH_DB"] = str(tmp / "db.sqlite3")
            os.environ["DJANGO_SETTINGS_MODULE"] = "benchproject.settings"
            os.environ["BENCH_HISTORY"] = "1" if args.history else "0"
            import django

            django.setup()
            from django.core.management import call_command

            call_command("migrate", verbosity=0)
            from redisq_django.connection import get_broker
            from redisq_django.core import worker as worker_mod
            from redisq_django.core.worker import WorkerOptions
            from redisq_django.runner import build_worker

            broker = get_broker()
            fill(broker.client, broker, DRAIN_N)
            profiles: list[cProfile.Profile] = []
            lock = threading.Lock()
            original_run = worker_mod.HandlerThread.run

            def profiled_run(self: worker_mod.HandlerThread) -> None:
                prof = cProfile.Profile()
                with lock:
                    profiles.append(prof)
                prof.runcall(original_run, self)

            if not args.no_profile:
                worker_mod.HandlerThread.run = profiled_run  # type: ignore[method-assign]
            options = WorkerOptions(prefetch=args.prefetch, burst=True, stats_interval=0)
            worker = build_worker(
                ["bench"], ["noop"], concurrency=args.concurrency, options=options
            )
            t = time.perf_counter()
            worker.run()
            elapsed = time.perf_counter() - t
            handled = worker.totals()["handled"]
        finally:
            server.stop()

    print(
        f"prefetch={args.prefetch} concurrency={args.concurrency} history={args.history}: "
        f"{handled} handled in "
        f"{elapsed:.2f} s (incl. the burst's final empty fetch){' under cProfile' * bool(profiles)}"
    )
    if profiles:
        stats = pstats.Stats(profiles[0])
        for p in profiles[1:]:
            stats.add(p)
        path = OUT / f"drain-p{args.prefetch}-c{args.concurrency}.pstats"
        stats.dump_stats(str(path))
        buf = io.StringIO()
        stats.stream = buf  # type: ignore[attr-defined]
        stats.strip_dirs().sort_stats(args.sort).print_stats(args.top)
        print(buf.getvalue())
        print(f"written {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
