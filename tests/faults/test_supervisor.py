"""``runconsumer --processes N``: a supervisor with real child processes and real signals.

Proves that the supervisor starts N workers, restarts one that dies (SIGKILL), forwards
SIGTERM as a warm stop (in-flight messages finish and are acked, exit code 0, no process
left behind) and a second SIGTERM as a cold one. The consumers record each delivery in
Redis (tests/faultapp/consumers.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Iterator

import pytest
import redis

from redisq_django.core import Broker

# The fault tests' fixtures: a migrated SQLite copy per test, worker processes killed at
# teardown (imported fixtures are shadowed by the test arguments of the same name).
from tests.support.workers import (
    GRACEFUL,
    PATIENT,
    WorkerProcess,
    Workers,
    read_deliveries,
    unacked,
    wait_deliveries,
    wait_for,
    wait_ids,
)

pytestmark = [
    pytest.mark.slow,
    # The worker processes consume queues declared in code (tests/faultapp/consumers.py),
    # fixed names by nature: each test starts them on an empty server.
    pytest.mark.usefixtures("empty_redis"),
]

STARTED = re.compile(r"(?:Started|Restarted) worker process (\d+)/\d+ \(pid (\d+)\)")


def _children(supervisor: WorkerProcess) -> dict[int, int]:
    """The current pid of each child slot, from the supervisor's log."""
    return {int(n): int(pid) for n, pid in STARTED.findall(supervisor.stderr)}


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _start_supervised(workers: Workers, processes: int = 2) -> WorkerProcess:
    supervisor = workers.start(GRACEFUL, "--processes", str(processes), "--grace-period", "20")
    wait_for(
        lambda: (
            len(_children(supervisor)) == processes
            and supervisor.stdout.count("redisq worker") == processes
        ),
        timeout=30,
        what=f"{processes} worker processes to start",
        describe=supervisor.tail,
    )
    return supervisor


def _busy_supervisor(
    workers: Workers, broker: Broker, client: redis.Redis, sleep: float, pids: list[int]
) -> tuple[WorkerProcess, dict[int, int], str]:
    """Two supervised workers, one of them running a message that takes ``sleep`` s:
    the supervisor, its children's pids by slot (added to ``pids``) and the message id."""
    supervisor = _start_supervised(workers)
    children = _children(supervisor)
    pids.extend(children.values())
    mid = broker.publish(GRACEFUL, {"sleep": sleep})
    (started,) = wait_deliveries(client, GRACEFUL, PATIENT, 1, timeout=20)
    assert started.id == mid and started.pid in children.values()
    return supervisor, children, mid


@pytest.fixture
def no_orphans() -> Iterator[list[int]]:
    """Pids to SIGKILL at teardown if a test left them running (it fails on them)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_sigkilled_child_is_restarted_and_later_messages_are_all_handled(
    workers: Workers, broker: Broker, redis_client: redis.Redis, no_orphans: list[int]
) -> None:
    # Given `runconsumer graceful --processes 2`: two worker processes
    supervisor = _start_supervised(workers)
    children = _children(supervisor)
    no_orphans.extend(children.values())
    assert "2 worker processes" in supervisor.stdout
    assert all(_alive(pid) for pid in children.values()) and supervisor.pid not in children

    # When one child is SIGKILLed
    os.kill(children[1], signal.SIGKILL)
    killed_at = time.monotonic()

    # Then the supervisor logs its death and starts a new process in its slot within seconds
    wait_for(
        lambda: _children(supervisor)[1] != children[1],
        timeout=10,
        what="the killed child to be restarted",
        describe=supervisor.tail,
    )
    restarted_after = time.monotonic() - killed_at
    new_pid = _children(supervisor)[1]
    no_orphans.append(new_pid)
    assert f"Worker process 1 (pid {children[1]}) died: killed by SIGKILL" in supervisor.stderr
    assert restarted_after < 5, restarted_after
    assert _alive(new_pid) and _alive(children[2])

    # And messages published afterwards are all handled, by both processes
    ids = [broker.publish(GRACEFUL, {"n": i}) for i in range(40)]
    done = wait_ids(redis_client, GRACEFUL, PATIENT, ids, timeout=30)
    assert {d.id for d in done} == set(ids)
    assert {d.pid for d in done} <= {new_pid, children[2]}


def test_sigterm_stops_every_child_warm_and_the_running_message_is_acked(
    workers: Workers, broker: Broker, redis_client: redis.Redis, no_orphans: list[int]
) -> None:
    # Given two worker processes, one of them handling a 3 s message
    supervisor, children, mid = _busy_supervisor(workers, broker, redis_client, 3, no_orphans)

    # When the supervisor gets SIGTERM
    supervisor.send(signal.SIGTERM)

    # Then it exits 0 once both children stopped warm, leaving no process behind
    assert supervisor.wait_exit(30) == 0, supervisor.tail()
    assert not [pid for pid in children.values() if _alive(pid)]
    assert supervisor.stderr.count("stopped: exit code 0") == 2, supervisor.tail()

    # And the running message finished and was acked: handled once, nothing pending
    assert [d.id for d in read_deliveries(redis_client, GRACEFUL, PATIENT)] == [mid]
    assert [
        d.id for d in wait_deliveries(redis_client, GRACEFUL, PATIENT, 1, timeout=1, done=True)
    ] == [mid]
    assert unacked(redis_client, GRACEFUL, PATIENT) == 0


def test_a_second_sigterm_stops_every_child_cold(
    workers: Workers, broker: Broker, redis_client: redis.Redis, no_orphans: list[int]
) -> None:
    # Given two worker processes, one of them handling a 20 s message
    supervisor, children, mid = _busy_supervisor(workers, broker, redis_client, 20, no_orphans)

    # When the supervisor gets SIGTERM twice
    supervisor.send(signal.SIGTERM)
    time.sleep(0.5)
    supervisor.send(signal.SIGTERM)

    # Then it exits 1 at once with its children, the message left pending for others
    assert supervisor.wait_exit(10) == 1, supervisor.tail()
    assert not [pid for pid in children.values() if _alive(pid)]
    assert [d.id for d in read_deliveries(redis_client, GRACEFUL, PATIENT)] == [mid]
    assert unacked(redis_client, GRACEFUL, PATIENT) == 1


def test_an_unknown_queue_is_one_clear_line_before_any_process_starts(
    workers: Workers,
) -> None:
    # When the supervisor is asked for a queue nobody consumes
    result = workers.run("runconsumer", "nope", "--processes", "2")

    # Then it exits 1 with one CommandError line and started no worker process
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("CommandError:")]
    assert len(errors) == 1 and "'nope'" in errors[0], result.stderr
    assert "Started worker process" not in result.stderr
