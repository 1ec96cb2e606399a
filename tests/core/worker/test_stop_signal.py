"""A stop requested from a signal handler: it must never wait for a lock.

A Python signal handler runs in the main thread between two bytecodes, possibly while
that thread holds a lock the handler then asks for: with ``threading.Event.set()`` in
the handler, a SIGTERM that lands inside the main loop's ``Event.wait`` hung
``runconsumer`` for good (seen once in CI: the worker logged the SIGTERM, then ran on).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from redisq_django.core.worker import StopSignal
from redisq_django.core.worker.state import WAKE_S

#: The main thread holds the lock its own wait uses, and a signal arrives right then.
SIGNAL_INSIDE_THE_WAIT = textwrap.dedent(
    """
    import signal
    from redisq_django.core.worker import StopSignal

    stop = StopSignal()
    signal.signal(signal.SIGUSR1, lambda *_: stop.request())
    with stop._event._cond:  # as inside Event.wait, before it sleeps
        signal.raise_signal(signal.SIGUSR1)  # the handler runs here, in this thread
    print("stopping" if stop.wait(5) else "not stopping", flush=True)
    """
)


@pytest.mark.slow  # a fresh Python process
def test_a_signal_inside_the_main_threads_wait_stops_the_worker_instead_of_hanging() -> None:
    # Given a process whose main thread is inside its stop signal's wait
    # When a signal handler requests the stop right then
    try:
        done = subprocess.run(
            [sys.executable, "-c", SIGNAL_INSIDE_THE_WAIT],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("the signal handler hung on the wait's lock") from None
    # Then the request is seen and the process goes on to stop
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopping"


def test_a_request_wakes_every_waiting_thread() -> None:
    # Given three threads waiting for up to 30 s
    stop = StopSignal()
    woke: list[bool] = []
    threads = [threading.Thread(target=lambda: woke.append(stop.wait(30))) for _ in range(3)]
    for t in threads:
        t.start()
    # When a stop is requested (as a signal handler does: no event set)
    stop.request(cold=True)
    # Then each one returns True well before its 30 s (within a few wake-up periods)
    for t in threads:
        t.join(timeout=20 * WAKE_S + 5)
    assert woke == [True, True, True]
    assert stop.is_set() and stop.cold


def test_a_wait_without_a_request_times_out_false() -> None:
    stop = StopSignal()
    started = time.monotonic()
    assert stop.wait(0.3) is False
    assert time.monotonic() - started >= 0.3
    assert not stop.is_set()
