"""How a worker stops: handlers get the grace period; what outlives it is handed back
(a warm stop) or left pending (a cold one), and the instances are marked dead.

A deliberate stop is no failed delivery. A message whose handler was still running when
the grace period ended is handed back without counting that delivery (``release``: the
retry set, due now, attempts unchanged): counted, it would make a message on its last
delivery (``max_retries=0``) a dead letter whose handler never failed, and an ordered
consumer's message keeps its key, so it runs again before the key's next message. A cold
stop (a second signal) leaves its messages pending, as a crash does (C3): other
instances take them over at once, counting the delivery.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from redisq_django.core.leases import end_own_leases
from redisq_django.core.worker.liveness import LivenessThread
from redisq_django.core.worker.state import StopSignal
from redisq_django.core.worker.threads import HandlerThread

logger = logging.getLogger("redisq.worker")

#: How long one join of a handler thread waits while the grace period runs (seconds).
JOIN_S = 0.05


def shut_down(
    threads: Callable[[], list[HandlerThread]],
    stop: StopSignal,
    liveness: LivenessThread,
    grace_period: float,
    crashed: Callable[[], bool],
) -> int:
    """Stop the handler threads: wait up to ``grace_period`` seconds for them (a cold
    stop ends the wait), then leave behind those still running.

    Args:
        threads: every handler thread of the worker, now.
        stop: the worker's stop signal (requested here; cold when signalled twice).
        liveness: heartbeats and lease renewals, kept up while the handlers finish.
        grace_period: seconds the handlers get.
        crashed: whether a handler thread died of an unexpected error.

    Returns:
        0 when every handler finished, else 1.
    """
    stop.request()
    cold_at_once, began = stop.cold, time.monotonic()
    deadline = began + grace_period
    # The liveness thread keeps heartbeating and renewing leases meanwhile.
    while time.monotonic() < deadline and any(t.is_alive() for t in threads()):
        if stop.cold:
            break
        for t in threads():
            t.join(timeout=JOIN_S)
    stuck = [t for t in threads() if t.is_alive()]
    if crashed() and not stop.cold:
        return 1
    if stop.cold:  # a second signal: what it leaves comes back as after a crash (C3)
        logger.warning(
            "Cold stop %.1f s into the warm stop: exiting now without waiting for %d "
            "handler thread(s); their %d unfinished message(s) stay pending: other "
            "instances take them over at once (this instance is marked dead), counting "
            "this delivery (one on its last delivery becomes a dead letter, reason "
            "lease_expired)",
            time.monotonic() - began,
            len(stuck),
            sum(len(t.held) for t in stuck),
        )
        mark_dead(threads() if cold_at_once else stuck, liveness)
        return 1
    if stuck:
        leave_behind(stuck, liveness, grace_period)
        return 1
    return 0


def leave_behind(
    stuck: Sequence[HandlerThread], liveness: LivenessThread, grace_period: float
) -> None:
    """The grace period is over with ``stuck`` still running: hand their messages back
    without counting this delivery, then mark their instances dead. What could not be
    handed back (Redis away, taken over meanwhile) stays pending and comes back by C3,
    counted."""
    liveness.stop()  # no lease renewal or heartbeat from here on
    handed = left = 0
    for t in stuck:
        held = list(t.held)  # the running message(s); a handler may end meanwhile
        try:
            # fail.lua settles only what this instance still holds: an ack written by a
            # handler that just ended wins, and this hand-back skips that message.
            released = t.sub.release(held) if held else 0
        except Exception:  # Redis away: they come back by C3 instead
            logger.debug("Could not hand back the messages of %s", t.name, exc_info=True)
            released = 0
        handed += released
        left += len(held) - released
    logger.warning(
        "Grace period of %g s over: exiting now without waiting for %d handler thread(s); "
        "their %d unfinished message(s) were handed back without counting this delivery: "
        "they run again from the start, on another instance or after a restart%s",
        grace_period,
        len(stuck),
        handed,
        (
            f"; {left} more could not be: other instances take them over, counting this delivery"
            if left
            else ""
        ),
    )
    mark_dead(stuck, liveness)


def mark_dead(threads: Sequence[HandlerThread], liveness: LivenessThread) -> None:
    """Expire the heartbeats of ``threads``' instances: other instances take what they
    hold over at once. The liveness thread stops first so that no late heartbeat
    revives them."""
    liveness.stop()
    for t in threads:
        try:
            t.sub.heartbeat(-1)
            # Leases of their own would hold tasks back that this process stops running.
            end_own_leases(t.sub.client, t.sub.gkeys, list(t.held))
        except Exception:
            logger.debug("Could not expire the heartbeat of %s", t.sub.instance, exc_info=True)
