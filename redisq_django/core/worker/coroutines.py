"""``async def`` handlers: one event loop per worker process, and instances that run their
batches on it.

A logical consumer whose handler is a coroutine function gets one
:class:`AsyncHandlerThread` per worker process instead of ``concurrency`` handler
threads: one instance (one subscription) that fetches up to ``concurrency`` messages,
starts all their handlers at once on the process's event loop (:class:`EventLoop`, a
thread of its own shared by every async consumer of the process) and settles them when
the batch is done. ``concurrency`` is thus the number of handlers in flight, not of
threads. Fetching, acknowledging, retries, dead letters, leases (every running message's
lease is renewed by the liveness thread), heartbeats, graceful shutdown and the
middleware are the handler thread's own: only running the handlers differs.

Every handler of a batch starts at once, so the instance records no single "started"
message in ``running`` (PROTOCOL.md: "record every start, or none"): when its process
dies, each message it held counts a delivery, as they all started.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, cast

from redisq_django.core.delivery import Delivery
from redisq_django.core.handler import ConsumerSpec, Reject
from redisq_django.core.outcome import Settlement
from redisq_django.core.wire import loggable
from redisq_django.core.worker.threads import HandlerThread, _stop_watch

logger = logging.getLogger("redisq.worker")

#: How long stopping the loop waits for its thread (s).
LOOP_STOP_TIMEOUT_S = 5.0


def is_async_handler(handler: Callable[..., Any]) -> bool:
    """Whether ``handler`` is an ``async def`` function (or a callable object whose
    ``__call__`` is one)."""
    call = type(handler).__dict__.get("__call__")  # an object whose __call__ is async
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


class EventLoop:
    """The worker process's event loop, run by a thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="redisq-asyncio", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            # Closes what handlers opened on this loop: async generators, and with them
            # the loop's own Redis client (redisq_django/connection.py) that apublish uses.
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        """Run ``coro`` on the loop (from any other thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        """Stop the loop once what runs now returns to it, and wait for its thread."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=LOOP_STOP_TIMEOUT_S)


class AsyncHandlerThread(HandlerThread):
    """One instance of a logical consumer with an ``async def`` handler: fetches up to
    ``spec.concurrency`` messages, runs their handlers together on ``loop``, settles
    them (see the module docstring). Takes :class:`HandlerThread`'s arguments and
    ``loop``."""

    def __init__(self, *, loop: EventLoop, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.event_loop = loop
        self._batch_size = self.spec.concurrency

    def apply(self, spec: ConsumerSpec) -> None:
        """Use ``spec`` from the next batch on (its concurrency: the next fetch's size)."""
        super().apply(spec)
        self._batch_size = spec.concurrency

    def _adapt_batch(self, size: int, elapsed: float) -> None:
        """A batch is always ``concurrency`` messages: they run together."""

    def _process(self, batch: list[Delivery], fetched_at: float) -> None:
        # fetched_at unused: every message starts at once, none waits for a stale lease
        self.hooks.before_batch(batch)
        running: list[Delivery] = []
        for i, message in enumerate(batch):
            if self.stopping or not self.quota.take():
                self._settle(functools.partial(self._release, batch[i:]))
                break
            running.append(message)
        if running:
            self.held = running  # every running message's lease is renewed
            outcomes = self._run_all(running)
            for message, (returned, error) in zip(running, outcomes, strict=True):
                if self._finish(message, returned, error):
                    self.acks.add(message)
            self.held = []
        self.hooks.after_batch(batch)
        self._settle(self.acks.flush)

    def _run_all(self, messages: list[Delivery]) -> list[tuple[object, BaseException | None]]:
        """Run the handlers of ``messages`` together on the loop and wait for them all
        (a cold stop, or a grace period that runs out, leaves this thread waiting here: the
        process exits and the messages come back)."""
        future = self.event_loop.submit(self._gather(messages))
        return cast("list[tuple[object, BaseException | None]]", future.result())

    async def _gather(self, messages: list[Delivery]) -> list[tuple[object, BaseException | None]]:
        return list(await asyncio.gather(*(self._run_one(m) for m in messages)))

    async def _run_one(self, message: Delivery) -> tuple[object, BaseException | None]:
        # In a task of its own: the middleware's per-message hooks run in its context, so
        # a span made current in before_process is current in this handler only.
        hooks = self.hooks
        if hooks.wants_before_process:
            hooks.before_process(message)
        started = time.perf_counter_ns()
        handler = cast("Callable[[Any], Awaitable[object]]", self.spec.handler)
        try:
            returned = await handler(message.message)
        except BaseException as exc:  # CancelledError too: its message fails, the loop goes on
            _stop_watch(message, started)
            if hooks.wants_after_process:
                hooks.after_process(message, error=exc)
            return None, exc
        _stop_watch(message, started)
        if hooks.wants_after_process:
            hooks.after_process(message, error=None)
        return returned, None

    def _finish(self, message: Delivery, returned: object, error: BaseException | None) -> bool:
        """Settle a failed handler's message (in this thread); True when it is to be acked."""
        if error is None:
            if isinstance(returned, Settlement):  # settled by the handler itself
                self._settled_by_handler(message, returned)
                return False
            return True
        message.failed = True
        if isinstance(error, Reject):
            self._settle(functools.partial(self._fail, message, error, reject=True))
            return False
        self._count("failed")
        logger.info(
            "Handler %s/%s failed on %s (attempt %d): %r",
            self.spec.queue,
            self.spec.name,
            loggable(message.id),
            message.attempts,
            error,
        )
        self._settle(functools.partial(self._fail, message, error, reject=False))
        return False
