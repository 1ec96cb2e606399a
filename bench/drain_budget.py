"""Per-message CPU budget of a drain (issue 39; not part of ``make bench``).

Drains N no-op messages in this process at concurrency 1 (the worker built as
``runconsumer bench --burst`` builds it: ``redisq_django.runner.build_worker``), three
ways, each with history off and on, and the same for a Django task queue
(``runconsumer --tasks``, the no-op task ``benchapp.noop_task.noop``):

* **clean**: nothing added; first->last handled per message (the benchmark's figure),
  beside the raw loop (``XREADGROUP COUNT 100`` + one ``XACK`` per 100) in the same run;
* **calls**: under cProfile: function calls per message in all, and per function (those
  called at least once per 10 messages), with their own time per message (inflated by
  the profiler: read the calls, compare the times only with each other);
* **stages**: ``time.perf_counter_ns()`` around each stage of the path (wrappers put on
  the functions below, their own cost measured and taken off): fetch and decode, the
  Delivery and Message objects, hooks, the handler call, the ack's packing and write,
  trend counters, history records, settling (replies); and the CPU time of the liveness
  thread (heartbeats, lease renewals) per message.

    .venv/bin/python bench/drain_budget.py                 # messages and tasks, both
    .venv/bin/python bench/drain_budget.py --only messages --n 20000 --top 40
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path[:0] = [str(REPO), str(BENCH_DIR)]

import run  # noqa: E402
from run import drain_raw, fill, redis_binary  # noqa: E402

from tests.support.redis_server import RedisServer  # noqa: E402

#: Stage name -> (module path, attribute path): each is timed where it is called.
STAGES: dict[str, tuple[str, str]] = {
    "fetch: XREADGROUP round trip": ("redisq_django.core.ended", "LogReader.read"),
    "fetch: envelope decode": ("redisq_django.core.envelope", "decode"),
    "fetch: _delivery (Delivery + Message, incl. decode)": (
        "redisq_django.core.subscription",
        "Subscription._delivery",
    ),
    "fetch: whole (read + decode + objects + promote)": (
        "redisq_django.core.subscription",
        "Subscription.fetch",
    ),
    "hooks: before/after batch": ("redisq_django.core.worker.middleware", "MiddlewareChain._call"),
    "handler: _run_handler (incl. the handler)": (
        "redisq_django.core.worker.threads",
        "HandlerThread._run_handler",
    ),
    "ack: queue + trend counts (AckPipe.add)": ("redisq_django.core.worker.acks", "AckPipe.add"),
    "ack: send (pack + mark + write)": ("redisq_django.core.worker.acks", "AckPipe.send"),
    "ack: pack the ack (_packed_command)": (
        "redisq_django.core.worker.acks",
        "AckPipe._packed_command",
    ),
    "history: the record (lifecycle.record)": ("redisq_django.core.lifecycle", "record"),
    "ack: write (Pipe.write_one, sendall)": ("redisq_django.core.pipelining", "Pipe.write_one"),
    "trends: pack the batch's counters": (
        "redisq_django.core.worker.acks",
        "AckPipe._packed_counts",
    ),
    "settle: read replies + on_acked (per batch)": (
        "redisq_django.core.worker.acks",
        "AckPipe._read_replies",
    ),
    "settle: tally (Tally.add)": ("redisq_django.core.worker.state", "Tally.add"),
    "tasks: execute (the task handler, settles itself)": (
        "redisq_django.tasks.execution",
        "execute",
    ),
}


def _resolve(module: str, attr: str) -> tuple[Any, str] | None:
    import importlib

    owner: Any = importlib.import_module(module)
    *path, name = attr.split(".")
    for part in path:
        owner = getattr(owner, part)
    return (owner, name) if hasattr(owner, name) else None


@contextmanager
def timed_stages(totals: dict[str, list[int]]) -> Iterator[None]:
    """Wrap every stage's function with a ``perf_counter_ns`` accumulator."""
    undo: list[tuple[Any, str, Any]] = []
    clock = time.perf_counter_ns
    for stage, (module, attr) in STAGES.items():
        found = _resolve(module, attr)
        if found is None:
            continue
        owner, name = found
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        if isinstance(original, (staticmethod, classmethod)):
            continue
        acc = totals[stage] = [0, 0]

        def wrapper(*a: Any, _f: Any = original, _acc: list[int] = acc, **k: Any) -> Any:
            t = clock()
            try:
                return _f(*a, **k)
            finally:
                _acc[0] += clock() - t
                _acc[1] += 1

        functools.update_wrapper(wrapper, original)
        setattr(owner, name, wrapper)
        undo.append((owner, name, original))
    try:
        yield
    finally:
        for owner, name, original in undo:
            setattr(owner, name, original)


def wrapper_cost_ns() -> float:
    """What one wrapper adds to a call (ns), measured here on an empty function."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    clock = time.perf_counter_ns
    acc = totals["x"]

    def f() -> None:
        pass

    def wrapper(*a: Any, _f: Any = f, _acc: list[int] = acc, **k: Any) -> Any:
        t = clock()
        try:
            return _f(*a, **k)
        finally:
            _acc[0] += clock() - t
            _acc[1] += 1

    n = 200_000
    t = clock()
    for _ in range(n):
        f()
    bare = clock() - t
    t = clock()
    for _ in range(n):
        wrapper()
    return (clock() - t - bare) / n


class Drain:
    """Fills and drains the benchmark's queue (or task queue) in this process."""

    def __init__(self, n: int, tasks: bool) -> None:
        from redisq_django.connection import get_broker

        self.n, self.tasks = n, tasks
        self.liveness_cpu = 0.0  # of the last run (seconds)
        self.broker = get_broker()
        self.client = self.broker.client

    def fill(self) -> None:
        if not self.tasks:
            fill(self.client, self.broker, self.n)
            return
        from benchapp.noop_task import noop

        from redisq_django.tasks.task_queues import task_queues

        self.client.flushdb()
        self.broker._registered.clear()
        for queue in task_queues(["bench_tasks"]):
            self.broker.consumers.ensure(queue, "tasks")
        for _ in range(self.n):
            noop.enqueue()

    def count_calls(self) -> Counter[str]:
        """Drain once, counting every call the handler thread makes (Python functions
        and built-ins, ``sys.setprofile`` of that thread alone: the main and liveness
        threads' calls, which depend on how long the drain takes, are left out)."""
        from redisq_django.core.worker import threads

        calls: Counter[str] = Counter()
        original = threads.HandlerThread._loop

        def count(frame: Any, event: str, arg: Any) -> None:
            if event == "call":
                code = frame.f_code
                calls[f"{Path(code.co_filename).name}:{code.co_firstlineno}({code.co_name})"] += 1
            elif event == "c_call":
                calls[f"<{getattr(arg, '__qualname__', arg)}>"] += 1

        def counted(thread: threads.HandlerThread) -> None:
            sys.setprofile(count)
            try:
                original(thread)
            finally:
                sys.setprofile(None)

        threads.HandlerThread._loop = counted  # type: ignore[method-assign]
        try:
            self.run()
        finally:
            threads.HandlerThread._loop = original  # type: ignore[method-assign]
        return calls

    def run(self) -> tuple[float, float]:
        """Drain; returns (first->last handled, the handler thread's CPU time) in seconds.

        CPU time (``time.thread_time()``: user and kernel, of the handler thread alone)
        moves far less with other jobs' load than any clock on the wall."""
        from benchapp import consumers

        from redisq_django.core.worker import WorkerOptions, liveness, threads
        from redisq_django.runner import build_worker

        consumers._drain.update(first=None, last=None, count=0)
        if self.tasks:
            from redisq_django.tasks.task_queues import task_queues

            queues, names = task_queues(["bench_tasks"]), ["tasks"]
        else:
            queues, names = ["bench"], ["noop"]
        options = WorkerOptions(prefetch=100, burst=True, stats_interval=0)
        worker = build_worker(queues, names, concurrency=1, options=options)
        cpu: list[float] = []
        original = threads.HandlerThread._loop

        def measured(thread: threads.HandlerThread) -> None:
            t = time.thread_time()
            try:
                original(thread)
            finally:
                cpu.append(time.thread_time() - t)

        live = liveness.LivenessThread.run

        def live_measured(thread: liveness.LivenessThread) -> None:
            t = time.thread_time()
            try:
                live(thread)
            finally:
                self.liveness_cpu = time.thread_time() - t

        threads.HandlerThread._loop = measured  # type: ignore[method-assign]
        liveness.LivenessThread.run = live_measured  # type: ignore[method-assign]
        try:
            worker.run()
        finally:
            threads.HandlerThread._loop = original  # type: ignore[method-assign]
            liveness.LivenessThread.run = live  # type: ignore[method-assign]
        handled = consumers._drain["count"]
        assert handled == self.n, (handled, self.n)
        return consumers._drain["last"] - consumers._drain["first"], sum(cpu)


def history(on: bool) -> Any:
    from django.conf import settings
    from django.test import override_settings

    return override_settings(REDISQ={**settings.REDISQ, "HISTORY": on})


def uptime() -> str:
    out = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout
    return out.split("load average:")[-1].strip()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20_000, help="messages per drain")
    ap.add_argument("--task-n", type=int, default=5_000, help="tasks per drain")
    ap.add_argument("--reps", type=int, default=3, help="clean drains per variant (median)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--only", choices=("messages", "tasks"), default=None)
    ap.add_argument("--calls-only", action="store_true", help="the handler thread's calls only")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="redisq-budget-") as tmpdir:
        tmp = Path(tmpdir)
        server = RedisServer(redis_binary(), tmp / "redis").start()
        try:
            os.environ["BENCH_REDIS_URL"] = server.url
            os.environ["BENCH_DB"] = str(tmp / "db.sqlite3")
            os.environ["DJANGO_SETTINGS_MODULE"] = "benchproject.settings"
            os.environ["BENCH_TASKS"] = "1"
            import django

            django.setup()
            from django.core.management import call_command

            call_command("migrate", verbosity=0)
            print(f"load at start: {uptime()}; wrapper cost {wrapper_cost_ns():.0f} ns/call")
            kinds = [("messages", False), ("tasks", True)]
            for kind, tasks in kinds:
                if args.only not in (None, kind):
                    continue
                for hist in (False, True):
                    with history(hist):
                        report(kind, Drain(args.task_n if tasks else args.n, tasks), hist, args)
        finally:
            server.stop()
    return 0


def report(kind: str, drain: Drain, hist: bool, args: argparse.Namespace) -> None:
    n = drain.n
    title = f"{kind}, history {'on' if hist else 'off'}, N={n}"
    print(f"\n=== {title}")
    if args.calls_only:
        drain.fill()
        calls = drain.count_calls()
        print(f"handler thread: {sum(calls.values()) / n:.1f} calls per message in all")
        return
    spans, cpus, raws = [], [], []
    for _ in range(args.reps):  # interleaved with the raw loop, same queue contents
        drain.fill()
        if not drain.tasks:
            run.DRAIN_N = n  # what drain_raw checks it drained
            raws.append(drain_raw(drain.client, drain.broker))
        span, cpu = drain.run()
        spans.append(span)
        cpus.append(cpu)
    span, cpu = statistics.median(spans), statistics.median(cpus)
    line = (
        f"clean: first->last {span / n * 1e6:.1f} us/msg, handler thread CPU "
        f"{cpu / n * 1e6:.1f} us/msg (medians of {args.reps}); liveness thread CPU "
        f"{drain.liveness_cpu / n * 1e6:.2f} us/msg (the last)"
    )
    if raws:
        raw = statistics.median(raws)
        line += f"; raw loop {raw / n * 1e6:.1f} us/msg; ratio raw/ours {raw / span:.2f}x"
    print(f"{line}; load {uptime()}")

    drain.fill()
    calls = drain.count_calls()
    print(
        f"handler thread: {sum(calls.values()) / n:.1f} calls per message in all "
        "(sys.setprofile of that thread: Python functions and built-ins)"
    )
    print(f"{'calls/msg':>9}  called >= once per 10 messages")
    for where, nc in calls.most_common():
        if nc < n / 10:
            break
        print(f"{nc / n:9.2f}  {where}")

    drain.fill()
    prof = cProfile.Profile()
    prof.enable()
    drain.run()
    prof.disable()
    stats = pstats.Stats(prof)
    raw_stats: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total_calls = sum(v[1] for v in raw_stats.values())
    print(f"cProfile (every thread): {total_calls / n:.1f} calls per message in all")
    rows = []
    for (file, line_no, func), (_, nc, tt, _ct, _) in raw_stats.items():
        if nc >= n / 10:
            where = f"{Path(file).name}:{line_no}({func})" if line_no else func
            rows.append((tt, nc, where))
    rows.sort(reverse=True)
    print(f"{'calls/msg':>9} {'own us/msg':>10}  function (called >= once per 10 messages)")
    for tt, nc, where in rows[: args.top]:
        print(f"{nc / n:9.2f} {tt / n * 1e6:10.2f}  {where}")

    drain.fill()
    totals: dict[str, list[int]] = {}
    cost = wrapper_cost_ns()
    with timed_stages(totals):
        span_t, _ = drain.run()
    print(
        f"stages (perf_counter_ns, wrapper cost {cost:.0f} ns/call taken off; "
        f"first->last with wrappers {span_t / n * 1e6:.1f} us/msg; load {uptime()}):"
    )
    print(f"{'us/msg':>8} {'calls/msg':>9}  stage")
    for stage, (ns, calls) in totals.items():
        if calls:
            print(f"{max(0.0, ns - calls * cost) / n / 1000:8.2f} {calls / n:9.2f}  {stage}")


if __name__ == "__main__":
    sys.exit(main())
