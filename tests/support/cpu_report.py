"""Where the suite's CPU goes, test by test: a pytest plugin for finding what to cut when
the suite outgrows CI's time (both cores are busy from start to end, so only CPU saved
is time saved, and a test's wall time under xdist says little about its cost).

    REDISQ_CPU_REPORT=/tmp/cpu/run make test

(tests/conftest.py registers it when ``REDISQ_CPU_REPORT`` is set; the server lanes
inherit it.) Each test process appends ``nodeid<TAB>cpu seconds<TAB>wall seconds`` per
test to ``$REDISQ_CPU_REPORT.<server>.<pid>``, ``<server>`` the path of the lane's
redis-server with ``/`` as ``_``. A test's CPU is what its process tree used while it ran
(setup, call and teardown): the test process and every process seen below it (Spark's
JVMs, redis-servers, workers), looked at every 0.25 s (a process that lives shorter
is missed). A session fixture's start counts against the first test that asks for it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Generator
from pathlib import Path

import pytest

from tests.support.redis_server import SERVER_ENV

REPORT_ENV = "REDISQ_CPU_REPORT"
_TICK = os.sysconf("SC_CLK_TCK")


#: How often the tree is looked at while a test runs (seconds): a process that lives
#: shorter than this between two looks is missed.
INTERVAL_S = 0.25


def _tree(root: int) -> dict[tuple[int, int], int]:
    """utime+stime of ``root`` and of every live process below it, by (pid, start time)."""
    children: dict[int, list[int]] = {}
    found: dict[int, tuple[int, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        found[pid] = (int(fields[19]), int(fields[11]) + int(fields[12]))
    tree, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in found:
            start, ticks = found[pid]
            tree[pid, start] = ticks
        todo.extend(children.get(pid, []))
    return tree


class _Watch(threading.Thread):
    """Looks at the tree every :data:`INTERVAL_S` while a test runs: the CPU of each
    process seen, from the test's start (or the process's, if later) to the last look.
    Looking, not waiting: Spark's JVM is not waited for by the command that started it
    (its ticks would leave the tree unseen when it ends)."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root, self.done = root, threading.Event()
        self.first = _tree(root)
        self.last = dict(self.first)

    def run(self) -> None:
        while not self.done.wait(INTERVAL_S):
            self.last.update(_tree(self.root))

    def stop(self) -> float:
        self.done.set()
        self.join()
        self.last.update(_tree(self.root))
        ticks = sum(t - self.first.get(p, 0) for p, t in self.last.items())
        return ticks / _TICK


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    report = os.environ[REPORT_ENV]
    watch, wall = _Watch(os.getpid()), time.monotonic()
    watch.start()
    yield
    cpu = watch.stop()
    server = os.environ.get(SERVER_ENV, "default").replace("/", "_")
    with open(f"{report}.{server}.{os.getpid()}", "a") as out:
        out.write(f"{item.nodeid}\t{cpu:.2f}\t{time.monotonic() - wall:.2f}\n")
