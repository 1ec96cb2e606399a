"""Supervising N worker processes: start them, restart the ones that die, stop them all.

``runconsumer --processes N`` runs a :class:`Supervisor` in place of a worker. Each child
is a fresh ``runconsumer ... --processes 1`` process, started with ``subprocess`` (an
``exec``, never a bare ``fork``): the supervisor has Django database connections and a
Redis connection pool open, and forking a process that holds sockets (or threads)
shares those sockets between parent and child; a new interpreter opens its own. It also
makes a child exactly what a single-process ``runconsumer`` is, with its banner, its
threads and its exit codes. Django-free: the command builds the child's command line.

Signals: the first SIGTERM/SIGINT to the supervisor asks every child for a warm stop
(:data:`WARM_SIGNAL`), the second for a cold one (:data:`COLD_SIGNAL`). Children run in
a process group of their own, so a Ctrl-C in a terminal reaches the supervisor only and
the children hear each request exactly once; a repeated SIGTERM to a child (a service
manager signalling every process as well) stays a warm stop. On Linux a child whose
supervisor dies (even by SIGKILL) gets :data:`WARM_SIGNAL` from the kernel, so no
worker is left behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

logger = logging.getLogger("redisq.worker")

#: In a child's environment: the supervisor's pid (the child is supervised).
CHILD_ENV = "REDISQ_SUPERVISOR_PID"
#: What the supervisor sends a child for a warm stop...
WARM_SIGNAL = signal.SIGTERM
#: ...and for a cold stop.
COLD_SIGNAL = signal.SIGQUIT
#: Waits before restarting a process that keeps dying, growing to the last (seconds).
RESTART_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
#: A process that ran this long was healthy: if it dies, its backoff starts over.
HEALTHY_AFTER_S = 60.0
#: How often the supervisor looks at its children (seconds).
POLL_S = 0.1
#: A warm stop gets the grace period plus this before it becomes a cold one, and a
#: cold one this long before the children are SIGKILLed (seconds).
STOP_MARGIN_S = 10.0


def is_supervised() -> bool:
    """Whether this process is a worker started by a supervisor."""
    return bool(os.environ.get(CHILD_ENV))


def describe_exit(returncode: int) -> str:
    """``exit code 1`` or ``killed by SIGKILL`` (``Popen.returncode`` is -signal)."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


@dataclass
class Child:
    """One slot of the supervisor: its current process and how often it died lately."""

    number: int
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    deaths: int = 0  # deaths in a row, each after less than HEALTHY_AFTER_S
    restart_at: float | None = None  # when to start it again (it died)
    done: bool = False  # exited 0 on its own (--burst, --max-messages): not restarted

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None


class Supervisor:
    """Runs ``processes`` copies of ``argv`` until stopped (see the module docstring).

    Args:
        argv: a child's command line (a single-process worker).
        processes: how many children run at once.
        grace_period: the children's grace period (seconds), to know when a warm stop
            is overdue.
        env: the children's environment (default: this one), :data:`CHILD_ENV` added.
        on_exit: called with the pid of each child that exited (e.g. to drop the live
            gauges of its metrics); its failures are logged.
        clock: monotonic seconds (tests).
    """

    def __init__(
        self,
        argv: Sequence[str],
        processes: int,
        *,
        grace_period: float,
        env: Mapping[str, str] | None = None,
        on_exit: Callable[[int], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.argv = list(argv)
        self.children = [Child(n) for n in range(1, processes + 1)]
        self.grace_period = grace_period
        self.env = dict(os.environ if env is None else env, **{CHILD_ENV: str(os.getpid())})
        self.clock = clock
        self.on_exit = on_exit
        self._warm_requested = False
        self._cold_requested = False
        self._sent: set[signal.Signals] = set()
        self._stop_deadline: float | None = None
        self.stop_codes: list[int] = []

    @property
    def stopping(self) -> bool:
        return self._warm_requested

    def stop(self, *, cold: bool = False) -> None:
        """Request a warm (or cold) stop of every child (safe from a signal handler)."""
        self._warm_requested = True
        self._cold_requested = self._cold_requested or cold

    def pids(self) -> list[int]:
        return [c.proc.pid for c in self.children if c.proc is not None and c.alive]

    def run(self) -> int:
        """Start the children and supervise them until stopped or all done.

        Returns:
            0 once every child stopped with exit code 0 (a warm stop, or each drained
            its work); 1 after a cold stop or when a child ended a stop with an error.
        """
        for child in self.children:
            self._start(child)
        while True:
            self._reap()
            if self._warm_requested:
                self._forward_stop()
                if not any(c.alive for c in self.children):
                    break
            elif all(c.done for c in self.children):
                break
            else:
                self._restart_due()
            time.sleep(POLL_S)
        cold = self._cold_requested or any(code != 0 for code in self.stop_codes)
        return 1 if cold else 0

    # -- children ----------------------------------------------------------------------

    def _start(self, child: Child) -> None:
        child.proc = subprocess.Popen(
            self.argv,
            env=self.env,
            stdin=subprocess.DEVNULL,
            process_group=0,  # signals come from us only (see the module docstring)
            preexec_fn=_stop_with_parent(os.getpid()),
        )
        child.started_at = self.clock()
        child.restart_at = None
        logger.info(
            "%s worker process %d/%d (pid %d)",
            "Restarted" if child.deaths else "Started",
            child.number,
            len(self.children),
            child.proc.pid,
        )

    def _reap(self) -> None:
        for child in self.children:
            if child.proc is None or child.restart_at is not None or child.done:
                continue
            code = child.proc.poll()
            if code is None:
                continue
            self._exited(child.proc.pid)
            if self._warm_requested:
                self.stop_codes.append(code)
                logger.info(
                    "Worker process %d (pid %d) stopped: %s",
                    child.number,
                    child.proc.pid,
                    describe_exit(code),
                )
                child.done = True
            elif code == 0:
                logger.info(
                    "Worker process %d (pid %d) finished its work (exit code 0)",
                    child.number,
                    child.proc.pid,
                )
                child.done = True
            else:
                self._schedule_restart(child, code)

    def _exited(self, pid: int) -> None:
        if self.on_exit is None:
            return
        try:
            self.on_exit(pid)
        except Exception:
            logger.exception("on_exit(%d) failed; continuing", pid)

    def _schedule_restart(self, child: Child, code: int) -> None:
        assert child.proc is not None
        if self.clock() - child.started_at >= HEALTHY_AFTER_S:
            child.deaths = 0
        wait = self._back_off(child)
        logger.warning(
            "Worker process %d (pid %d) died: %s; restarting it in %.1f s",
            child.number,
            child.proc.pid,
            describe_exit(code),
            wait,
        )

    def _back_off(self, child: Child) -> float:
        """Schedule ``child``'s next start after its backoff; the wait in seconds."""
        wait = RESTART_BACKOFF_S[min(child.deaths, len(RESTART_BACKOFF_S) - 1)]
        child.deaths += 1
        child.restart_at = self.clock() + wait
        return wait

    def _restart_due(self) -> None:
        now = self.clock()
        for child in self.children:
            if child.restart_at is not None and now >= child.restart_at:
                try:
                    self._start(child)
                except OSError as exc:  # e.g. out of processes or memory: try again later
                    wait = self._back_off(child)
                    logger.error(
                        "Could not start worker process %d (%s); trying again in %.1f s",
                        child.number,
                        exc,
                        wait,
                    )

    # -- stopping ----------------------------------------------------------------------

    def _forward_stop(self) -> None:
        now = self.clock()
        if self._stop_deadline is None:
            self._stop_deadline = now + self.grace_period + STOP_MARGIN_S
            for child in self.children:  # a pending restart is cancelled
                if child.restart_at is not None:
                    child.restart_at, child.done = None, True
        overdue = now >= self._stop_deadline
        if self._cold_requested or overdue:
            if overdue and COLD_SIGNAL not in self._sent:
                logger.warning("Worker processes still running after the grace period")
            self._signal_all(COLD_SIGNAL)
            if now >= self._stop_deadline + STOP_MARGIN_S:
                self._signal_all(signal.SIGKILL)
        else:
            self._signal_all(WARM_SIGNAL)

    def _signal_all(self, sig: signal.Signals) -> None:
        if sig in self._sent:
            return
        self._sent.add(sig)
        if sig == COLD_SIGNAL and not self._cold_requested:
            self._cold_requested = True
        for child in self.children:
            if child.alive and child.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    child.proc.send_signal(sig)


def _stop_with_parent(parent: int) -> Callable[[], None] | None:
    """A ``preexec_fn``: on Linux, the child gets a warm stop when its supervisor dies."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(WARM_SIGNAL))
        if os.getppid() != parent:  # the supervisor died before prctl: stop now
            os._exit(1)

    return preexec
