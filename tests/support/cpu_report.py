"""Where the suite's CPU goes, test by test: a pytest plugin for finding what to cut when
the suite outgrows CI's time (both cores are busy from start to end, so only CPU saved
is time saved, and a test's wall time under xdist says little about its cost).

    REDISQ_CPU_REPORT=/tmp/cpu/run make test

(tests/conftest.py registers it when ``REDISQ_CPU_REPORT`` is set; the server lanes
inherit it.) Each test process appends ``nodeid<TAB>cpu seconds<TAB>wall seconds`` per
test to ``$REDISQ_CPU_REPORT.<server>.<pid>``, ``<server>`` the path of the lane's
redis-server with ``/`` as ``_``. A test's CPU is what its process tree used while it ran
(setup, call and teardown): the test process, every process below it still running
(Spark's JVM, redis-servers, workers) and every one that ended and was waited for.
A session fixture's start counts against the first test that asks for it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator
from pathlib import Path

import pytest

from tests.support.redis_server import SERVER_ENV

REPORT_ENV = "REDISQ_CPU_REPORT"
_TICK = os.sysconf("SC_CLK_TCK")


def _tree_ticks(root: int) -> int:
    """utime+stime of ``root`` and every live process below it, and of the ones they
    waited for (cutime+cstime)."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        ticks[pid] = sum(int(f) for f in fields[11:15])
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    report = os.environ[REPORT_ENV]
    pid = os.getpid()
    ticks, wall = _tree_ticks(pid), time.monotonic()
    yield
    cpu = (_tree_ticks(pid) - ticks) / _TICK
    server = os.environ.get(SERVER_ENV, "default").replace("/", "_")
    with open(f"{report}.{server}.{pid}", "a") as out:
        out.write(f"{item.nodeid}\t{cpu:.2f}\t{time.monotonic() - wall:.2f}\n")
