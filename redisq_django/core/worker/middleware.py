"""Hooks around the worker loop for cross-cutting behaviour (DB hygiene, metrics...).

Subclass :class:`Middleware` and override what you need; every hook is a no-op by
default. ``before_*`` hooks run in the order the middleware are given, ``after_*`` hooks
in reverse order (the first middleware wraps all the others). A hook that raises is
logged and skipped: it never stops the worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from redisq_django.core.delivery import Delivery
from redisq_django.core.handler import ConsumerSpec
from redisq_django.core.outcome import Settlement
from redisq_django.core.worker.state import Tally

logger = logging.getLogger("redisq.worker")


class RunningWorker(Protocol):
    """What the worker start/stop hooks may look at."""

    @property
    def instance_prefix(self) -> str: ...

    @property
    def specs(self) -> Mapping[tuple[str, str], ConsumerSpec]: ...

    @property
    def tally(self) -> Tally:
        """Its counts per (queue, consumer, what): ``handled``, ``failed``, ``retried``,
        ``dead``, ``lost``, ``reclaimed`` (what metrics export)."""
        ...

    def stop(self, *, cold: bool = False) -> None: ...


class Middleware:
    """No-op hooks the worker calls around each batch and each message.

    Hooks get the :class:`~redisq_django.core.delivery.Delivery` of each message: its
    handler's timings, its stream entry, and its message (``delivery.message``, which
    it also reads as: ``delivery.id``, ``delivery.headers``, …).
    """

    def on_worker_start(self, worker: RunningWorker) -> None:
        """Called in the main thread before any message is fetched."""

    def on_worker_stop(self, worker: RunningWorker) -> None:
        """Called in the main thread after the last handler finished."""

    def before_batch(self, deliveries: Sequence[Delivery]) -> None:
        """Called in the handler's thread before the handlers of a fetched batch run."""

    def after_batch(self, deliveries: Sequence[Delivery]) -> None:
        """Called in the handler's thread once a batch is handled."""

    def before_process(self, delivery: Delivery) -> None:
        """Called in the handler's thread just before the handler runs."""

    def after_process(self, delivery: Delivery, *, error: BaseException | None) -> None:
        """Called in the handler's thread after the handler returned or raised."""

    def after_settle(self, delivery: Delivery, settlement: Settlement) -> None:
        """Called once the message is settled: ``settlement.outcome`` is ``ACKED``,
        ``RETRIED`` (``settlement.retry_in_ms``), ``DEAD`` (``settlement.reason``) or
        ``LOST`` (another instance took it over); ``settlement.error`` is what its
        handler raised."""


def _overrides(middleware: Sequence[Middleware], hook: str) -> list[Callable[..., None]]:
    # Only middleware that override a hook are called for it, so the per-message hooks
    # cost nothing when no middleware uses them (the common case on the hot path).
    base = getattr(Middleware, hook)
    return [getattr(mw, hook) for mw in middleware if getattr(type(mw), hook) is not base]


class MiddlewareChain:
    """Calls each hook on every middleware that implements it, logging failures."""

    def __init__(self, middleware: Sequence[Middleware]) -> None:
        self.middleware = list(middleware)
        forward = {
            h: _overrides(self.middleware, h)
            for h in ("on_worker_start", "before_batch", "before_process")
        }
        backward = {
            h: list(reversed(_overrides(self.middleware, h)))
            for h in ("on_worker_stop", "after_batch", "after_process", "after_settle")
        }
        self._hooks = {**forward, **backward}
        # The per-message hooks run on the hot path: each has its own list, and the
        # handler threads skip the ones nobody implements (see the wants_* flags).
        self._before_process = self._hooks["before_process"]
        self._after_process = self._hooks["after_process"]
        self._after_settle = self._hooks["after_settle"]
        self.wants_before_process = bool(self._before_process)
        self.wants_after_process = bool(self._after_process)
        self.wants_after_settle = bool(self._after_settle)
        #: Whether any per-message hook is implemented (the hot path skips them if not).
        self.per_message = (
            self.wants_before_process or self.wants_after_process or self.wants_after_settle
        )

    def _call(self, hook: str, *args: Any, **kwargs: Any) -> None:
        for fn in self._hooks[hook]:
            try:
                fn(*args, **kwargs)
            except Exception:
                _failed(fn)

    def on_worker_start(self, worker: RunningWorker) -> None:
        self._call("on_worker_start", worker)

    def on_worker_stop(self, worker: RunningWorker) -> None:
        self._call("on_worker_stop", worker)

    def before_batch(self, deliveries: Sequence[Delivery]) -> None:
        self._call("before_batch", deliveries)

    def after_batch(self, deliveries: Sequence[Delivery]) -> None:
        self._call("after_batch", deliveries)

    def before_process(self, delivery: Delivery) -> None:
        for fn in self._before_process:
            try:
                fn(delivery)
            except Exception:
                _failed(fn)

    def after_process(self, delivery: Delivery, *, error: BaseException | None) -> None:
        for fn in self._after_process:
            try:
                fn(delivery, error=error)
            except Exception:
                _failed(fn)

    def after_settle(self, delivery: Delivery, settlement: Settlement) -> None:
        for fn in self._after_settle:
            try:
                fn(delivery, settlement)
            except Exception:
                _failed(fn)


def _failed(fn: Callable[..., None]) -> None:
    logger.exception("Middleware hook %s failed; continuing", fn.__qualname__)
