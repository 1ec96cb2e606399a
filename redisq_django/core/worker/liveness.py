"""Liveness on a thread of its own: heartbeats and lease extension, never behind other work.

The worker's main thread also refreshes configuration, sinks dead letters and relays the
outbox, all database work that can wait seconds for a lock. Liveness must not wait with
it: a lease that runs out while its handler still runs lets another instance start the
message a second time. This thread only talks to Redis (through the subscriptions'
connection pool), so a slow database cannot delay it.

Margins (what a stall of everything, e.g. a frozen Redis, a paused VM, may last without
another instance taking over messages that are still being handled):

* the lease of each thread's running message (only that one: what it prefetched and has
  not started is left to expire, so that idle instances can take it over) is renewed
  every third of the shortest visibility timeout (:data:`LEASE_RENEWAL_FRACTION`), so it
  tolerates a stall of about two thirds of it (40 s for the default 60 s); a message
  started late in its batch (a thread starts none from a batch older than a third of
  the timeout) at least one third;
* a running message with a lease of its own (``Message.lease_ms``, a task's visibility
  timeout, ``core/leases.py``) has it renewed every third of its length, looked for
  every :data:`OWN_LEASE_POLL_S`: its handler started the lease, so the first renewal
  is due a third of it later, whatever the consumers' timeouts;
* heartbeats go out every ``heartbeat_interval`` and live ``heartbeat_ttl``
  (:data:`DEFAULT_HEARTBEAT_TTL_S`), so they tolerate a stall of ``ttl - interval``
  (14 s by default). The TTL is also how long a SIGKILLed instance's messages wait
  before others take them over when its visibility timeout is longer.

After a stall the late jobs run at once (the clock does not wait a full interval).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from redisq_django.core.errors import ConsumerNotFound, RedisUnavailable
from redisq_django.core.wire import loggable
from redisq_django.core.worker.ticker import Every, Ticker

if TYPE_CHECKING:
    from redisq_django.core.delivery import Delivery
    from redisq_django.core.worker.threads import HandlerThread

logger = logging.getLogger("redisq.worker")

#: Seconds between two heartbeats of an instance.
DEFAULT_HEARTBEAT_INTERVAL_S = 1.0
#: Seconds an instance's heartbeat lives: silent this long, it is dead and others take
#: over its messages. Many intervals, so a Redis frozen for up to ``TTL - interval``
#: seconds (the reclaimers are frozen with it) does not make live instances look dead.
DEFAULT_HEARTBEAT_TTL_S = 15.0
#: Leases are renewed each time this fraction of the shortest visibility timeout passed.
LEASE_RENEWAL_FRACTION = 1 / 3
#: Lease renewal never runs more often than this (seconds).
MIN_LEASE_RENEWAL_S = 0.2
#: How often the liveness thread looks for leases of their own due for renewal (seconds).
OWN_LEASE_POLL_S = MIN_LEASE_RENEWAL_S
#: How long stopping waits for a heartbeat or renewal in progress (seconds).
STOP_WAIT_S = 2.0


def lease_renewal_interval(visibility_timeouts_ms: Sequence[int]) -> float:
    """Seconds between lease renewals for consumers with these visibility timeouts."""
    shortest = min(visibility_timeouts_ms, default=60_000)
    return max(MIN_LEASE_RENEWAL_S, shortest / 1000.0 * LEASE_RENEWAL_FRACTION)


class LivenessThread(threading.Thread):
    """Heartbeats the live handler threads and renews the leases of what they hold.

    Args:
        threads: the handler threads now (asked again at each round).
        heartbeat_interval: seconds between heartbeats.
        heartbeat_ttl: seconds each heartbeat lives.
        renewal_interval: seconds between lease renewals (asked again each time, as the
            visibility timeouts can change while running).
    """

    def __init__(
        self,
        *,
        threads: Callable[[], Sequence[HandlerThread]],
        heartbeat_interval: float,
        heartbeat_ttl: float,
        renewal_interval: Callable[[], float],
    ) -> None:
        super().__init__(name="redisq-liveness", daemon=True)
        self._threads = threads
        self._ttl_ms = int(heartbeat_ttl * 1000)
        self._halt = threading.Event()
        self._ticker = Ticker(
            [
                Every("heartbeat", heartbeat_interval, self.heartbeat),
                Every("extend", renewal_interval, self.extend_leases),
                Every("own leases", OWN_LEASE_POLL_S, self.renew_own_leases),
            ]
        )
        #: (instance, entry id) -> when (monotonic) its own lease was last renewed.
        self._renewed: dict[tuple[str, bytes], float] = {}

    def run(self) -> None:
        while not self._halt.is_set():
            self._ticker.run_due()
            self._halt.wait(self._ticker.seconds_to_next())

    def stop(self) -> None:
        """Stop after the round in progress (waiting for it at most :data:`STOP_WAIT_S`).

        The worker calls this last, once in-flight messages are settled, and before it
        expires the heartbeats on a cold stop (so no late heartbeat revives them).
        """
        self._halt.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(STOP_WAIT_S)

    def heartbeat(self) -> None:
        """Announce every live handler thread's instance alive for the TTL, with its
        report (what its handler runs now among it), and renew its slots' leases."""
        for t in self._threads():
            if self._halt.is_set():
                return
            if t.is_alive():
                held = t.held  # replaced, never changed, by the handler thread
                with _each(t, "heartbeat"):
                    t.sub.heartbeat(self._ttl_ms, held[-1] if held else None)
                    if t.slots_held and t.flow is not None:  # its slots live as long
                        t.flow.renew(t)

    def extend_leases(self) -> None:
        """Renew the lease of the message each handler thread runs (unless it has a lease
        of its own: :meth:`renew_own_leases`)."""
        for t in self._threads():
            if self._halt.is_set():
                return
            # A copy: the handler thread changes its list meanwhile.
            held = [m for m in list(t.held) if not m.lease_ms]
            if held and t.is_alive():
                self._extend(t, held)

    def renew_own_leases(self) -> None:
        """Renew each running message's lease of its own once a third of it has passed
        since it was started or last renewed."""
        now = time.monotonic()
        renewed: dict[tuple[str, bytes], float] = {}
        for t in self._threads():
            if self._halt.is_set():
                return
            due = []
            for m in list(t.held):
                if not m.lease_ms:
                    continue
                key = (t.sub.instance, m.entry_id)
                last = renewed[key] = self._renewed.get(key, now)  # new: its start renewed it
                if now - last >= lease_renewal_interval([m.lease_ms]):
                    due.append(m)
                    renewed[key] = now
            if due and t.is_alive():
                self._extend(t, due)
        self._renewed = renewed

    def _extend(self, thread: HandlerThread, deliveries: list[Delivery]) -> None:
        with _each(thread, "lease renewal"):
            for m in thread.sub.extend(deliveries):
                logger.warning(
                    "Lease of %s lost to another instance; it will be handled again there",
                    loggable(m.id),
                )


@contextlib.contextmanager
def _each(thread: HandlerThread, what: str) -> Iterator[None]:
    """One instance's failure never keeps the others' liveness from Redis."""
    try:
        yield
    except (RedisUnavailable, ConsumerNotFound) as exc:  # handler threads report these
        logger.debug("%s of %s skipped: %s", what, thread.sub.instance, exc)
    except Exception as exc:
        logger.warning("%s of %s failed: %r", what.capitalize(), thread.sub.instance, exc)
