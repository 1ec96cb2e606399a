"""Time limits of handlers (``ConsumerSpec.time_limit``): a handler that runs too long is
stopped, its message retried, and the worker goes on.

The worker's main thread watches every handler of a consumer with a limit (each turn of
its loop, about ten times a second). When one has run past its limit:

- its delivery is settled at once as a failed attempt, with the error
  ``TimeLimitExceeded("time limit exceeded after 30 s")``: retried after its backoff,
  then a dead letter, as any failure — even while the handler is still stuck;
- a thread handler gets :class:`TimeLimitExceeded` raised into it
  (``PyThreadState_SetAsyncExc``), which stops Python code at its next bytecode; an
  ``async def`` handler is cancelled by its own ``asyncio.timeout``. What the handler
  does after that is ignored: its delivery is already settled.

Python cannot interrupt a thread blocked in a C call (a socket read without a timeout,
``time.sleep``, a C extension): the exception arrives when the call returns. A handler
still on the same message a grace period after its limit (``REDISQ
["SHUTDOWN_GRACE_PERIOD"]``) is stuck for good: the worker stops cold and exits with
code 1, so that its supervisor (``runconsumer --processes``, systemd, Kubernetes) starts a
new process; its other in-flight messages come back to other instances as after a
crash (counted as a delivery).
"""

from __future__ import annotations

import ctypes
import threading
import time

from redisq_django.core.delivery import Delivery
from redisq_django.core.errors import RedisqError


class TimeLimitExceeded(RedisqError):
    """A handler ran past its consumer's ``time_limit``: its attempt failed (retried, then
    a dead letter). Raised into a thread handler; an async one is cancelled."""


def exceeded(limit: float) -> TimeLimitExceeded:
    """The error recorded for an attempt stopped after ``limit`` seconds."""
    return TimeLimitExceeded(f"time limit exceeded after {limit:g} s")


def _raise_in(thread_id: int, exc: type[BaseException] | None) -> None:
    """Raise ``exc`` in thread ``thread_id`` at its next bytecode (None: clear one
    raised there that has not been seen yet)."""
    set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    target = ctypes.py_object(exc) if exc is not None else None
    set_async_exc(ctypes.c_ulong(thread_id), target)


class Watch:
    """The running handler of one handler thread, as the watchdog sees it.

    The thread arms it with each delivery and disarms it when the handler returned; the
    watchdog fires at most once per delivery. Arming, firing and disarming take one lock,
    so an exception is raised into the thread only while that handler runs, and one
    raised as it returned is cleared before the thread goes on.
    """

    __slots__ = ("_lock", "delivery", "fired", "limit", "started", "thread_id")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.delivery: Delivery | None = None
        self.limit = 0.0
        self.started = 0.0
        self.fired = False
        self.thread_id = 0

    def arm(self, delivery: Delivery, limit: float) -> None:
        """``delivery``'s handler starts now in this thread, with ``limit`` seconds."""
        with self._lock:
            self.delivery, self.limit, self.fired = delivery, limit, False
            self.thread_id = threading.get_ident()
            self.started = time.monotonic()

    def disarm(self) -> None:
        """The handler returned (or raised): nothing is raised into this thread any more."""
        with self._lock:
            if self.fired:  # raised after the handler returned: never seen by our code
                _raise_in(self.thread_id, None)
            self.delivery = None

    def overdue(self, now: float) -> Delivery | None:
        """The delivery whose handler just ran past its limit, once (None: none): the
        exception is raised into the thread and the delivery marked timed out."""
        with self._lock:
            delivery = self.delivery
            if delivery is None or self.fired or now - self.started < self.limit:
                return None
            self.fired = True
            delivery.timed_out = True
            _raise_in(self.thread_id, TimeLimitExceeded)
            return delivery

    def stuck(self, now: float, grace: float) -> bool:
        """Whether the handler is still on the delivery it was stopped on ``grace``
        seconds after its limit: a call Python cannot interrupt."""
        with self._lock:
            return (
                self.delivery is not None
                and self.fired
                and now - self.started >= self.limit + grace
            )
