"""Housekeeping on one clock: jobs that run every so often from the worker's main thread."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from redisq_django.core.errors import ConsumerNotFound, RedisUnavailable

logger = logging.getLogger("redisq.worker")

#: A job that runs longer than this (seconds) and than its interval is logged.
SLOW_JOB_S = 5.0


@dataclass
class Every:
    """Run ``job`` every ``interval_s`` seconds (a callable is asked again each time, for
    intervals that follow the configuration).

    Attributes:
        name: shown in logs when the job fails.
        interval_s: seconds between runs (``float("inf")``: never again).
        job: what to run.
        first_after_s: delay before the first run (0: at once).
        on_stop: run once when the worker stops warm, after its last handler (e.g. give
            back a lease the job holds).
    """

    name: str
    interval_s: float | Callable[[], float]
    job: Callable[[], object]
    first_after_s: float = 0.0
    on_stop: Callable[[], object] | None = None
    next_due: float = field(default=0.0, init=False)

    def interval(self) -> float:
        return self.interval_s() if callable(self.interval_s) else self.interval_s


class Ticker:
    """Runs the :class:`Every` jobs that are due, logging (never raising) their failures."""

    def __init__(
        self, jobs: Iterable[Every] = (), *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.clock = clock
        self.jobs: list[Every] = []
        for job in jobs:
            self.add(job)

    def add(self, job: Every) -> None:
        job.next_due = self.clock() + job.first_after_s
        self.jobs.append(job)

    def run_due(self) -> None:
        """Run every job whose time has come (each at most once per call)."""
        now = self.clock()
        for job in self.jobs:
            if now < job.next_due:
                continue
            interval = job.interval()
            job.next_due = now + interval
            started = self.clock()
            try:
                job.job()
            except (RedisUnavailable, ConsumerNotFound) as exc:  # threads report these
                logger.debug("%s skipped: %s", job.name, exc)
            except Exception:
                logger.exception("Worker housekeeping job %r failed", job.name)
            took = self.clock() - started
            if took > max(SLOW_JOB_S, interval):
                # E.g. a database lock: the jobs that share this clock waited as long.
                logger.warning("Worker housekeeping job %r took %.1f s", job.name, took)

    def seconds_to_next(self) -> float:
        """Seconds until the next job is due (0 when one is late; 1 with no jobs)."""
        if not self.jobs:
            return 1.0
        return max(0.0, min(job.next_due for job in self.jobs) - self.clock())
