"""One logical consumer run to empty in the calling thread: the handler threads' own loop.

A test (``redisq_django.testing.drain``) must run handlers in its own thread: a Django
``TestCase`` holds its data in a transaction of that thread's database connection,
which a handler in another thread would not see. :func:`run_burst` builds the same
:class:`HandlerThread` a :class:`~redisq_django.core.worker.Worker` starts, with a burst
pace, and calls its ``run()`` here instead of ``start()``: fetch, handle, settle, the
scripts and the middleware hooks are the worker's, not a copy of them. What a worker's
main thread adds around its threads (heartbeats, lease renewal, time limits, rate and
concurrency limits) does not apply: handlers run one at a time, to the end.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from redisq_django.core.handler import ConsumerSpec
from redisq_django.core.partitions import Place
from redisq_django.core.worker.coroutines import AsyncHandlerThread, EventLoop, is_async_handler
from redisq_django.core.worker.middleware import MiddlewareChain
from redisq_django.core.worker.state import Pace, Quota, StopSignal, Tally
from redisq_django.core.worker.threads import HandlerThread

if TYPE_CHECKING:
    from redisq_django.core.broker import Broker

#: A burst: small batches, no waiting for messages that are not there (a fetch with
#: ``block_ms`` 0 does not block), acks as each handler returns.
BURST_PACE = Pace(prefetch=10, block_ms=0, burst=True, reclaim_interval=2.0)


def run_burst(
    broker: Broker,
    spec: ConsumerSpec,
    *,
    quota: Quota,
    tally: Tally,
    hooks: MiddlewareChain,
    instance: str | None = None,
) -> None:
    """Handle ``spec``'s messages in this thread until none is waiting for it (on every
    partition of a partitioned queue), or ``quota`` is spent.

    Retries still in their backoff keep it fetching until they are due (a burst ends
    only when none waits): a caller that does not want to wait delivers them at once
    from an ``after_settle`` hook (``operator.deliver_waiting``).

    Raises:
        BaseException: what broke the handler loop itself (a bug, a failing hook), as
            a worker's thread would die of it; a handler's own errors are failures of
            its message, never raised here.
    """
    crashed: list[BaseException] = []
    instance = instance or f"burst-{os.getpid()}-{spec.name}"
    count = broker.partitions.count(spec.queue)
    loop: EventLoop | None = None
    try:
        for partition in range(count) if count > 1 else (None,):
            where = "" if partition is None else f"-p{partition}"
            sub = broker.subscribe(
                Place(spec.queue, partition),
                spec.name,
                f"{instance}{where}",
                policy=spec.policy,
                ordered=spec.ordered,
                wait_replicas=spec.wait_replicas,
            )
            parts: dict[str, Any] = dict(
                spec=spec,
                sub=sub,
                index=0 if partition is None else f"p{partition}-0",
                stop=StopSignal(),
                pace=BURST_PACE,
                quota=quota,
                hooks=hooks,
                tally=tally,
                on_crash=lambda _thread, exc: crashed.append(exc),
            )
            if is_async_handler(spec.handler):  # its handlers run on a loop of its own
                loop = loop or EventLoop()
                thread: HandlerThread = AsyncHandlerThread(loop=loop, **parts)
            else:
                thread = HandlerThread(**parts)
            thread.run()  # here: never start()ed
            if crashed:
                raise crashed[0]
            if quota.exhausted:
                return
    finally:
        if loop is not None:
            loop.stop()
