"""What the flow-control tests share: how many starts fall in one window of time, and a
Django worker run in a thread of the test process."""

from __future__ import annotations

import threading

from django.db import connections

from redisq_django.core.worker import Worker


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
