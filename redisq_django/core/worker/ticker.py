"""Housekeeping on one clock: jobs that run every so often from the worker's main thread."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from redisq_django.core.errors import RedisUnavailable

logger = logging.getLogger("redisq.worker")


@dataclass
class Every:
    """Run ``job`` every ``interval_s`` seconds (a callable is asked again each time, for
    intervals that follow the configuration).

    Attributes:
        name: shown in logs when the job fails.
        interval_s: seconds between runs (``float("inf")``: never again).
        job: what to run.
        first_after_s: delay before the first run (0: at once).
    """

    name: str
    interval_s: float | Callable[[], float]
    job: Callable[[], object]
    first_after_s: float = 0.0
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
            job.next_due = now + job.interval()
            try:
                job.job()
            except RedisUnavailable as exc:  # the handler threads report outages
                logger.debug("%s skipped: %s", job.name, exc)
            except Exception:
                logger.exception("Worker housekeeping job %r failed", job.name)
