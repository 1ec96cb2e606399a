"""Real ``manage.py runconsumer`` processes for the fault-injection tests.

Workers run as ``python -m django runconsumer ... --settings tests.settings`` from the
repository root, with ``REDISQ_TEST_URL`` (the Redis to consume from) and
``REDISQ_TEST_DB`` (a migrated SQLite file shared by the workers of one test) in
their environment. Their stdout and stderr go to files (never pipes, which could
fill up and block a worker); tests read those files.

Every wait here is bounded twice: by a deadline and by a number of polls.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import redis

from redisq_django.core import Broker
from tests.faultapp.consumers import deliveries_key, done_key
from tests.support.redis_server import _die_with_parent

REPO_ROOT = Path(__file__).resolve().parents[2]
SETTINGS = "tests.settings"
POLL_S = 0.05
#: Ceiling of any single wait, however long a test asks for.
MAX_WAIT_S = 180.0
#: A process that ignores SIGKILL this long is reported, never waited on forever.
KILL_WAIT_S = 10.0

T = TypeVar("T")

#: Queues of tests/faultapp/consumers.py: ``graceful``, whose consumer ``patient`` has a
#: 60 s visibility timeout (no lease expires during a test), and ``together``, whose
#: consumers the workers that start together run.
GRACEFUL, PATIENT = "graceful", "patient"
TOGETHER = "together"


def unacked(client: redis.Redis, queue: str, group: str) -> int:
    """Deliveries of ``group`` not yet acknowledged (log and private stream)."""
    keys = Broker(client).keys(queue)
    total = 0
    for stream in (keys.log, keys.group(group).direct):
        with contextlib.suppress(redis.ResponseError):  # stream or group not created yet
            total += int(client.xpending(stream, group)["pending"])
    return total


class WaitTimeout(AssertionError):
    """A bounded wait ran out; the message says what was expected and what was seen."""


def wait_for(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = POLL_S,
    describe: Callable[[], str] | None = None,
) -> T:
    """Poll ``probe`` until it returns something truthy; return that value.

    Bounded by ``timeout`` seconds and by ``timeout / interval + 1`` polls.

    Raises:
        WaitTimeout: naming ``what`` (and ``describe()``, the state seen last).
    """
    timeout = min(timeout, MAX_WAIT_S)
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / interval) + 2):
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    detail = f"; last seen: {describe()}" if describe is not None else ""
    raise WaitTimeout(f"timed out after {timeout:.1f}s waiting for {what}{detail}")


# ---------------------------------------------------------------------------
# What the test consumers recorded (see tests/faultapp/consumers.py)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    """One line the handler recorded: which message, which attempt, which process."""

    id: str
    attempts: int
    pid: int


def _parse(lines: list[bytes]) -> list[Delivery]:
    out = []
    for line in lines:
        mid, attempts, pid = line.decode().split()
        out.append(Delivery(mid, int(attempts), int(pid)))
    return out


def read_deliveries(client: redis.Redis, queue: str, name: str) -> list[Delivery]:
    """Every delivery to ``queue``/``name`` whose handler started, in order."""
    return _parse(client.lrange(deliveries_key(queue, name), 0, -1))


def read_done(client: redis.Redis, queue: str, name: str) -> list[Delivery]:
    """Every delivery to ``queue``/``name`` whose handler returned normally."""
    return _parse(client.lrange(done_key(queue, name), 0, -1))


def wait_deliveries(
    client: redis.Redis,
    queue: str,
    name: str,
    n: int,
    *,
    timeout: float,
    done: bool = False,
    match: Callable[[Delivery], bool] | None = None,
) -> list[Delivery]:
    """Wait until at least ``n`` deliveries (matching ``match``) are recorded.

    Returns:
        All recorded deliveries (matching ``match``) at that moment.
    """
    read = read_done if done else read_deliveries

    def matching() -> list[Delivery]:
        return [d for d in read(client, queue, name) if match is None or match(d)]

    def enough() -> list[Delivery] | None:
        seen = matching()
        return seen if len(seen) >= n else None

    return wait_for(
        enough,
        timeout=timeout,
        what=f"{n} {'completed ' if done else ''}deliveries to {queue}/{name}",
        interval=0.1,
        describe=lambda: f"{len(matching())} recorded",
    )


def wait_ids(
    client: redis.Redis,
    queue: str,
    name: str,
    ids: Sequence[str],
    *,
    timeout: float,
    done: bool = True,
) -> list[Delivery]:
    """Wait until every id in ``ids`` is recorded (completed, by default) at least once."""
    wanted = set(ids)
    read = read_done if done else read_deliveries

    def missing() -> set[str]:
        return wanted - {d.id for d in read(client, queue, name)}

    wait_for(
        lambda: not missing() or None,
        timeout=timeout,
        what=f"all {len(wanted)} ids handled by {queue}/{name}",
        interval=0.2,
        describe=lambda: f"{len(missing())} missing",
    )
    return read(client, queue, name)


def duplicates(deliveries: Sequence[Delivery]) -> int:
    """How many deliveries repeat an id seen before."""
    counts = Counter(d.id for d in deliveries)
    return sum(c - 1 for c in counts.values())


# ---------------------------------------------------------------------------
# Worker processes
# ---------------------------------------------------------------------------


class WorkerProcess:
    """A running ``runconsumer`` subprocess with its output in files."""

    def __init__(
        self, proc: subprocess.Popen[bytes], stdout_path: Path, stderr_path: Path, argv: list[str]
    ) -> None:
        self.proc = proc
        self.stdout_path = stdout_path
        self.stderr_path = stderr_path
        self.argv = argv
        self.started_at = time.monotonic()

    def __repr__(self) -> str:
        return f"<WorkerProcess pid={self.pid} {' '.join(self.argv)} rc={self.proc.poll()}>"

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def send(self, sig: signal.Signals) -> None:
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL and reap (bounded)."""
        self.send(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(KILL_WAIT_S)

    def wait_exit(self, timeout: float) -> int:
        """The exit code, waiting at most ``timeout`` seconds.

        Raises:
            WaitTimeout: still running (with the tail of its stderr).
        """
        try:
            return self.proc.wait(min(timeout, MAX_WAIT_S))
        except subprocess.TimeoutExpired:
            raise WaitTimeout(
                f"{self!r} still running after {timeout:.1f}s; stderr tail:\n{self.tail()}"
            ) from None

    def wait_ready(self, timeout: float = 30.0) -> WorkerProcess:
        """Wait until the worker printed its banner (its consumers are about to run)."""

        def ready() -> bool:
            if not self.alive:
                raise AssertionError(
                    f"{self!r} exited while starting; stderr:\n{self.tail()}\n"
                    f"stdout:\n{self.stdout}"
                )
            return "redisq worker" in self.stdout

        wait_for(ready, timeout=timeout, what=f"{self!r} to start", describe=self.tail)
        return self

    def wait_log(self, text: str, timeout: float) -> str:
        """Wait until ``text`` appears on the worker's stderr; return the stderr."""
        return wait_for(
            lambda: self.stderr if text in self.stderr else None,
            timeout=timeout,
            what=f"{text!r} on the stderr of {self!r}",
            describe=self.tail,
        )

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.stderr.splitlines()[-lines:])
        except OSError:
            return "(no stderr)"


class Workers:
    """Starts worker processes against one Redis and one database; kills them all in
    :meth:`close` (call it from a fixture's teardown)."""

    def __init__(self, redis_url: str, db_path: Path, log_dir: Path) -> None:
        self.redis_url = redis_url
        self.db_path = db_path
        self.log_dir = log_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.started: list[WorkerProcess] = []
        #: More environment for every process started from now on.
        self.extra_env: dict[str, str] = {}

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("DJANGO_SETTINGS_MODULE", None)
        env.update(
            REDISQ_TEST_URL=self.redis_url,
            REDISQ_TEST_DB=str(self.db_path),
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        env.update(extra)
        return env

    def _argv(self, args: Sequence[str]) -> list[str]:
        return [sys.executable, "-m", "django", *args, "--settings", SETTINGS]

    def run(
        self, *args: str, timeout: float = 60.0, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a management command to completion (bounded), capturing its output."""
        return subprocess.run(
            self._argv(args),
            cwd=REPO_ROOT,
            env=env or self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=min(timeout, MAX_WAIT_S),
            check=False,
            preexec_fn=_die_with_parent(),
        )

    def migrate(self) -> None:
        result = self.run("migrate", "--verbosity", "0", timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"migrate failed:\n{result.stdout}\n{result.stderr}")

    def start(self, *args: str) -> WorkerProcess:
        """Start ``runconsumer *args`` in the background (not waiting for it)."""
        return self.start_command("runconsumer", *args)

    def start_command(self, *argv: str) -> WorkerProcess:
        """Start any management command (``runserver ...``) in the background."""
        argv = list(argv)
        n = len(self.started)
        out_path = self.log_dir / f"worker-{n}.out"
        err_path = self.log_dir / f"worker-{n}.err"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(
                self._argv(argv),
                cwd=REPO_ROOT,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                preexec_fn=_die_with_parent(),
            )
        worker = WorkerProcess(proc, out_path, err_path, argv)
        self.started.append(worker)
        return worker

    def close(self) -> None:
        """SIGKILL every worker still running (each by its own pid) and reap it."""
        for worker in self.started:
            worker.kill()

    def report(self) -> str:
        """Exit codes and stderr tails of every worker (for failure messages)."""
        return "\n".join(f"{w!r}\n{w.tail(15)}" for w in self.started)


def sqlite_execute(db_path: Path, sql: str, params: Sequence[Any] = ()) -> int:
    """Run one statement on a worker database file (as an admin edit would)."""
    import sqlite3

    conn = sqlite3.connect(db_path, timeout=30)
    try:
        with conn:
            return conn.execute(sql, params).rowcount
    finally:
        conn.close()
