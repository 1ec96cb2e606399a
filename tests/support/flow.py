"""What the flow-control tests share: how many starts fall in one window of time, and a
Django worker run in a thread of the test process."""

from __future__ import annotations

import threading

from django.db import connections

from redisq_django.core.worker import Worker

# A start is recorded by the handler, after the limiter granted it; on a starved CPU a
# thread may reach its handler this much later, so starts granted an interval apart can
# be seen closer together. A limit kept per worker instead of per consumer (the bug these
# tests are for) lets twice as many through, far above the slack.
LATENESS = 0.3


def most_allowed(per_second: float, burst: int, window: float = 1.0) -> int:
    """The most starts a limit of ``per_second`` with ``burst`` lets be seen in any
    ``window`` of seconds: ``burst`` at once, then one an interval, with starts seen up
    to ``LATENESS`` late."""
    return burst + int((window + LATENESS) * per_second)


def most_in_any_window(times: list[float], window: float) -> int:
    """The most of ``times`` in any half-open span ``(t - window, t]``."""
    times = sorted(times)
    most, j = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - window:
            j += 1
        most = max(most, i - j + 1)
    return most


def run_in_thread(worker: Worker) -> threading.Thread:
    """Start ``worker.run()`` in a daemon thread that closes its own database connection
    when the worker returns (SQLite's included, which Django's ``close()`` leaves open
    for in-memory databases)."""

    def run() -> None:
        try:
            worker.run()
        finally:
            conn = connections["default"]
            if conn.vendor == "sqlite" and conn.connection is not None:
                conn.connection.close()
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
