"""The history jobs against their plainest baselines, side by side (issue 37, point 8).

Run with ``make bench-pipeline BENCH_ONLY=replay,cli,report [BENCH_ARGS="--root DIR"]`` or
``.venv/bin/python bench/history_speed.py [--only replay,cli,report] [--root DIR]``;
needs the ``pipeline`` extra, Java 17+ and a redis-server (``make redis``). The archive is
``bench/pipeline_history.py``'s synthetic one (``--events``, 10,000,000 by default, 7 days
ending yesterday), generated into ``--root`` unless it holds one already (``--root`` keeps
it for the next run). Each part runs its contenders in turns, ``--reps`` rounds, so that
the machine's load (its cores may be shared) falls on both alike; the 1-minute load
average is printed beside every figure.

- **replay** (warm): the ``replay`` job in this process on a session that has replayed
  once already, against pipelined ``XADD`` of the very bytes the replay wrote (read back
  from Redis: no JSON work, no Spark) with raw redis-py, batches of 500. The first
  ``--replay`` (500,000) messages of one queue, selected by time (so dates prune), to a
  private redis-server, ``FLUSHALL`` before each.
- **cli** (cold): ``python -m redisq_django.pipeline replay`` of the same messages, wall
  time of the process, against a bare ``SparkSession.builder...getOrCreate()`` then
  ``stop()`` in a fresh process with the configuration the job's session gets
  (``JVM_START``), and the warm replay above: what the command costs beyond the JVM's
  start and the work itself.
- **report**: ``python -m redisq_django.pipeline report`` over the archive's whole range
  with the CLI's defaults, against ``bench/report_baseline.py`` (a hand-written PySpark
  job computing the same aggregates from the same files), each a fresh process: wall
  time, and the time each says its job took (after its session started).

Prints one table per part. Nothing is asserted; bench/RESULTS.md records the figures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path[:0] = [str(REPO), str(BENCH_DIR)]

import redis  # noqa: E402
from pipeline import java_version, log, redis_binary  # noqa: E402
from pipeline_history import (  # noqa: E402
    REPLAY_QUEUE,
    cli,
    expected_events_per_message,
    generate,
    load,
    raw_xadd,
    replay_until,
    stream_fields,
)

from redisq_django.core import Broker  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

PARTS = ("replay", "cli", "report")

#: A fresh process that starts Spark's JVM and a session with the settings the job's
#: session gets (``session.build_session``: the same conf, the same driver memory), and
#: stops it: what any Spark job pays before its first line of work.
JVM_START = r"""
import json, sys
from pyspark.sql import SparkSession
builder = SparkSession.builder
for key, value in json.loads(sys.argv[1]).items():
    builder = builder.config(key, value)
builder.getOrCreate().stop()
"""


def archive_span(root: Path) -> tuple[dt.datetime, dt.datetime]:
    """The days the archive under ``root`` covers, from its date directories: the first
    day's start and the last day's end (UTC)."""
    days = sorted(
        dt.date.fromisoformat(p.name.removeprefix("date="))
        for p in (root / "messages").glob("queue=*/date=*")
    )
    if not days:
        raise SystemExit(f"no archive in {root}")
    first, last = days[0], days[-1] + dt.timedelta(days=1)
    return (
        dt.datetime(first.year, first.month, first.day, tzinfo=dt.UTC),
        dt.datetime(last.year, last.month, last.day, tzinfo=dt.UTC),
    )


def timed(f: Callable[[], Any]) -> tuple[float, float, Any]:
    """``f()``'s seconds, the load average before it, and its result."""
    before = load()
    t0 = time.perf_counter()
    result = f()
    return time.perf_counter() - t0, before, result


def session_settings(master: str) -> dict[str, str]:
    """The settings ``build_session`` gives the job's session on ``master`` (its JVM's
    included: the driver memory it chooses)."""
    from redisq_django.pipeline.session import DEFAULT_APP_NAME, DEFAULT_CONF
    from redisq_django.pipeline.tuning import local_driver_memory, machine_memory_mb

    settings = {"spark.app.name": DEFAULT_APP_NAME, **DEFAULT_CONF, "spark.master": master}
    return settings | local_driver_memory(settings, machine_memory_mb())


def jvm_start(master: str) -> float:
    """Wall seconds of :data:`JVM_START` in a fresh process."""
    import json

    argv = [sys.executable, "-c", JVM_START, json.dumps(session_settings(master))]
    t0 = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True, timeout=600)
    return time.perf_counter() - t0


def median_ratio(pairs: list[tuple[float, float]]) -> float:
    """The median over rounds of ``a / b``."""
    return statistics.median(a / b for a, b in pairs)


def bench_replay(
    spark: Any, root: Path, url: str, n: int, reps: int, window: tuple[dt.datetime, dt.datetime]
) -> dict[str, Any]:
    """Warm replay against raw pipelined XADD of the same bytes, ``reps`` rounds."""
    from redisq_django.pipeline.job_options import ReplayOptions
    from redisq_django.pipeline.replay import replay

    client = redis.Redis.from_url(url)
    key = Broker(client).keys(REPLAY_QUEUE).log
    options = ReplayOptions(
        redis_url=url, root=str(root), queue=REPLAY_QUEUE, since=window[0], until=window[1]
    )
    client.flushall()
    log(f"replay: a first run of {n:,} (the session's first), then {reps} rounds ...")
    first = replay(spark, options, progress=lambda line: None)
    entries = stream_fields(client, key)
    assert len(entries) == first.published, (len(entries), first.published)
    client.flushall()
    rounds = []
    for i in range(reps):
        ours, ours_load, _ = timed(lambda: replay(spark, options, progress=lambda _: None))
        assert client.xlen(key) == len(entries)
        client.flushall()
        raw, raw_load, _ = timed(lambda: raw_xadd(client, key, entries))
        client.flushall()
        rounds.append((ours, ours_load, raw, raw_load))
        log(
            f"  round {i + 1}: replay {len(entries) / ours:,.0f} msg/s (load {ours_load:.1f}), "
            f"raw {len(entries) / raw:,.0f} msg/s (load {raw_load:.1f}): {raw / ours:.2f}x"
        )
    return {"n": len(entries), "first": first.seconds, "rounds": rounds}


def bench_cli(
    root: Path, url: str, master: str, reps: int, window: tuple[dt.datetime, dt.datetime]
) -> list[tuple[float, float, float, float]]:
    """The replay command against a bare session's start and stop, ``reps`` rounds:
    (jvm seconds, its load, CLI wall, its load) each."""
    client = redis.Redis.from_url(url)
    args = ["replay", "--root", str(root), "--master", master, "--redis-url", url]
    args += ["--queue", REPLAY_QUEUE, "--since", window[0].isoformat()]
    args += ["--until", window[1].isoformat()]
    rounds = []
    for i in range(reps):
        jvm, jvm_load, _ = timed(lambda: jvm_start(master))
        client.flushall()
        run = cli(args)
        client.flushall()
        rounds.append((jvm, jvm_load, run.wall, run.load_before, run.job))
        log(
            f"  round {i + 1}: bare session {jvm:.1f} s (load {jvm_load:.1f}), "
            f"replay CLI {run.wall:.1f} s, job {run.job:.1f} s (load {run.loads})"
        )
    return rounds


def bench_report(
    root: Path, tmp: Path, master: str, reps: int, span: tuple[dt.datetime, dt.datetime]
) -> list[tuple[Any, Any]]:
    """The report command (the CLI's defaults) against the hand-written baseline, each a
    fresh process, ``reps`` rounds."""
    since, until = (t.isoformat() for t in span)
    report_args = ["report", "--root", str(root), "--master", master]
    report_args += ["--since", since, "--until", until, "--out", str(tmp / "report")]
    baseline = [sys.executable, str(BENCH_DIR / "report_baseline.py"), "--root", str(root)]
    baseline += ["--master", master, "--since", since, "--until", until]
    baseline += ["--out", str(tmp / "baseline")]
    rounds = []
    for i in range(reps):
        ours = cli(report_args)
        log(f"  round {i + 1}: report {ours.wall:.1f} s wall, {ours.job:.1f} s job ({ours.loads})")
        theirs = run_baseline(baseline)
        log(f"  round {i + 1}: baseline {theirs.wall:.1f} s, {theirs.job:.1f} s ({theirs.loads})")
        rounds.append((ours, theirs))
    return rounds


def run_baseline(argv: list[str]) -> Any:
    """``bench/report_baseline.py`` in a fresh process, as a :class:`CliRun`."""
    import re

    from pipeline_history import CliRun

    before = load()
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=3600, env=env, check=False)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"baseline failed: {done.stderr[-2000:]}")
    line = done.stdout.strip().splitlines()[-1]
    seconds = re.search(r" in ([\d.]+) s", line)
    return CliRun(wall, float(seconds[1]) if seconds else float("nan"), line, before, load())


def table(header: list[str], rows: list[list[Any]]) -> None:
    """Print ``rows`` under ``header``, right-aligned columns."""
    cells = [header, *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))


def print_replay(warm: dict[str, Any]) -> None:
    n = warm["n"]
    print(f"\nreplay, warm, {n:,} messages, against raw pipelined XADD of the same bytes")
    table(
        ["round", "replay msg/s", "load", "raw msg/s", "load", "replay/raw"],
        [
            [
                i,
                f"{n / ours:,.0f}",
                f"{ol:.1f}",
                f"{n / raw:,.0f}",
                f"{rl:.1f}",
                f"{raw / ours:.2f}",
            ]
            for i, (ours, ol, raw, rl) in enumerate(warm["rounds"], 1)
        ],
    )
    pairs = [(raw, ours) for ours, _, raw, _ in warm["rounds"]]
    first = warm["first"]
    print(f"median replay/raw {median_ratio(pairs):.2f}x (the session's first run: {first:.1f} s)")


def print_cli(n: int, rounds: list[tuple[float, ...]], warm: dict[str, Any] | None) -> None:
    print(f"\nreplay CLI, cold, {n:,} messages: wall seconds")
    table(
        ["round", "bare session", "load", "CLI wall", "CLI job", "load", "CLI - bare"],
        [
            [
                i,
                f"{jvm:.1f}",
                f"{jl:.1f}",
                f"{wall:.1f}",
                f"{job:.1f}",
                f"{wl:.1f}",
                f"{wall - jvm:.1f}",
            ]
            for i, (jvm, jl, wall, wl, job) in enumerate(rounds, 1)
        ],
    )
    if warm is not None:
        ours = statistics.median(r[0] for r in warm["rounds"])
        over = statistics.median(wall - jvm - ours for jvm, _, wall, _, _ in rounds)
        print(f"median CLI wall - bare session - warm replay ({ours:.1f} s): {over:.1f} s")


def print_report(span: tuple[dt.datetime, dt.datetime], rounds: list[tuple[Any, Any]]) -> None:
    print(f"\nreport over {span[0]:%Y-%m-%d}..{span[1]:%Y-%m-%d}: seconds, each a fresh process")
    table(
        ["round", "report wall", "job", "load", "baseline wall", "job", "load", "wall ratio"],
        [
            [
                i,
                f"{o.wall:.1f}",
                f"{o.job:.1f}",
                o.loads,
                f"{t.wall:.1f}",
                f"{t.job:.1f}",
                t.loads,
                f"{o.wall / t.wall:.2f}",
            ]
            for i, (o, t) in enumerate(rounds, 1)
        ],
    )
    wall = median_ratio([(o.wall, t.wall) for o, t in rounds])
    job = median_ratio([(o.job, t.job) for o, t in rounds])
    print(f"median report/baseline: wall {wall:.2f}x, job {job:.2f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=",".join(PARTS), help=f"parts, comma-separated: {PARTS}")
    ap.add_argument("--root", help="the archive (generated there when missing; kept)")
    ap.add_argument("--events", type=int, default=10_000_000, help="events generated (about)")
    ap.add_argument("--days", type=int, default=7, help="days a generated archive spans")
    ap.add_argument("--replay", type=int, default=500_000, help="messages replayed")
    ap.add_argument("--reps", type=int, default=3, help="rounds of each comparison")
    ap.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    args = ap.parse_args()
    only = set(args.only.split(","))
    if only - set(PARTS):
        ap.error(f"--only takes {', '.join(PARTS)}")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import pyspark

    from redisq_django.pipeline.session import build_session

    n_messages = round(args.events / expected_events_per_message())
    print(
        f"history speed: {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"PySpark {pyspark.__version__}, {java_version()}, master {args.master}"
    )
    with tempfile.TemporaryDirectory(prefix="redisq-bench-speed-") as tmpdir:
        tmp = Path(tmpdir)
        root = Path(args.root) if args.root else tmp / "archive"
        if not (root / "messages").exists():
            from pipeline_history import archive_start

            log(f"generating {n_messages:,} messages and ~{args.events:,} events in {root} ...")
            spark = build_session(args.master)
            spark.sparkContext.setLogLevel("ERROR")
            generate(spark, root, n_messages, archive_start(args.days), args.days, 168)
            spark.stop()
        span = archive_span(root)
        days = (span[1] - span[0]).days
        replay_n = min(args.replay, n_messages // 3)
        window = (span[0], replay_until(span[0], days, n_messages, replay_n))
        print(f"archive {root}: {span[0]:%Y-%m-%d}..{span[1]:%Y-%m-%d}, {n_messages:,} messages")

        if only & {"replay", "cli"}:
            server = RedisServer(redis_binary(), tmp / "redis").start()
            try:
                warm = None
                if "replay" in only:
                    spark = build_session(args.master)
                    spark.sparkContext.setLogLevel("ERROR")
                    warm = bench_replay(spark, root, server.url, replay_n, args.reps, window)
                    spark.stop()
                    print_replay(warm)
                if "cli" in only:
                    log(f"cli: bare session vs replay CLI, {args.reps} rounds ...")
                    rounds = bench_cli(root, server.url, args.master, args.reps, window)
                    print_cli(replay_n, rounds, warm)
            finally:
                server.stop()

        if "report" in only:
            log(f"report: the CLI vs the hand-written baseline, {args.reps} rounds ...")
            print_report(span, bench_report(root, tmp, args.master, args.reps, span))
    return 0


if __name__ == "__main__":
    sys.exit(main())
