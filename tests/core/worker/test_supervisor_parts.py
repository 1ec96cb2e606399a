"""The supervisor's restart rules with tiny child processes (no Django, no Redis)."""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

import pytest

from redisq_django.core.worker.supervisor import CHILD_ENV, Supervisor, describe_exit

# A child that exits with the code its run number (1st, 2nd, ...) maps to, counting runs
# as lines appended to a file (appends of concurrent children never overwrite each
# other): argv[1] = the file, argv[2:] = exit codes of runs 1, 2, ... (then 0).
CHILD = f"""
import os, sys
path, codes = sys.argv[1], [int(c) for c in sys.argv[2:]]
with open(path, "a") as f:
    f.write("run\\n")
runs = len(open(path).read().splitlines()) - 1
assert os.environ["{CHILD_ENV}"]
sys.exit(codes[runs] if runs < len(codes) else 0)
"""


def runs(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_exits_are_described_by_code_or_signal() -> None:
    assert describe_exit(0) == "exit code 0"
    assert describe_exit(3) == "exit code 3"
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL"


def test_children_that_finish_are_not_restarted(tmp_path: Path) -> None:
    # Given two children that exit 0 at once (as --burst does once drained)
    sup = Supervisor([sys.executable, "-c", CHILD, str(tmp_path / "runs")], 2, grace_period=1.0)

    # When supervised, Then the supervisor ends with 0 after exactly two runs
    assert sup.run() == 0
    assert runs(tmp_path / "runs") == 2


def test_a_child_that_dies_is_restarted_after_a_backoff(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given one child that exits 3 on its first two runs, then 0
    sup = Supervisor(
        [sys.executable, "-c", CHILD, str(tmp_path / "runs"), "3", "3"], 1, grace_period=1.0
    )

    # When supervised
    with caplog.at_level(logging.INFO, logger="redisq.worker"):
        code = sup.run()

    # Then it was started three times, waiting 0.5 s then 1 s, and the run ends with 0
    assert code == 0
    assert runs(tmp_path / "runs") == 3
    deaths = [r.getMessage() for r in caplog.records if "died" in r.getMessage()]
    assert [d.split(": ", 1)[1] for d in deaths] == [
        "exit code 3; restarting it in 0.5 s",
        "exit code 3; restarting it in 1.0 s",
    ]
    assert sum("Restarted worker process 1/1" in r.getMessage() for r in caplog.records) == 2


def test_on_exit_hears_the_pid_of_every_child_that_exited(tmp_path: Path) -> None:
    # Given one child that dies once (exit 3), then finishes (exit 0), and an on_exit hook
    exited: list[int] = []
    sup = Supervisor(
        [sys.executable, "-c", CHILD, str(tmp_path / "runs"), "3"],
        1,
        grace_period=1.0,
        on_exit=exited.append,
    )

    # When supervised
    assert sup.run() == 0

    # Then the hook got both processes' pids, each once, the last one being the final child
    assert runs(tmp_path / "runs") == 2
    assert len(exited) == 2 and len(set(exited)) == 2
    assert sup.children[0].proc is not None and exited[-1] == sup.children[0].proc.pid
