"""Hooks around the worker loop for cross-cutting behaviour (DB hygiene, metrics...).

Subclass :class:`Middleware` and override what you need; every hook is a no-op by
default. A hook that raises is logged and skipped: it never stops the worker.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from redisq_django.core.message import Message

logger = logging.getLogger("redisq.worker")


class Middleware:
    """No-op hooks the worker calls around each batch and each message."""

    def before_batch(self, messages: Sequence[Message]) -> None:
        """Called in the handler's thread before the handlers of a fetched batch run."""

    def after_batch(self, messages: Sequence[Message]) -> None:
        """Called in the handler's thread once a batch is handled (before its ack)."""

    def before_process(self, message: Message) -> None:
        """Called in the handler's thread just before the handler runs."""

    def after_process(self, message: Message, *, error: BaseException | None) -> None:
        """Called in the handler's thread after the handler returned or raised."""

    def after_settle(self, message: Message, outcome: str) -> None:
        """Called once the message is acked (``"acked"``), ``"retried"``, ``"dead"``
        or ``"lost"`` (another instance took it over)."""

    def on_worker_start(self, worker: Any) -> None:
        """Called in the main thread before any message is fetched."""

    def on_worker_stop(self, worker: Any) -> None:
        """Called in the main thread after the last handler finished."""


HOOKS = (
    "before_batch",
    "after_batch",
    "before_process",
    "after_process",
    "after_settle",
    "on_worker_start",
    "on_worker_stop",
)


class MiddlewareChain:
    """Calls a hook on every middleware, logging (not raising) their failures.

    Only middleware that override a hook are called for it, so the per-message hooks
    cost nothing when no middleware uses them (the common case on the hot path).
    """

    def __init__(self, middleware: Sequence[Middleware]) -> None:
        self.middleware = list(middleware)
        self._active = {
            hook: [
                getattr(mw, hook)
                for mw in self.middleware
                if getattr(type(mw), hook, None) is not getattr(Middleware, hook)
            ]
            for hook in HOOKS
        }

    def has(self, hook: str) -> bool:
        """Whether any middleware implements ``hook``."""
        return bool(self._active[hook])

    def call(self, hook: str, *args: Any, **kwargs: Any) -> None:
        for fn in self._active[hook]:
            try:
                fn(*args, **kwargs)
            except Exception:
                logger.exception("Middleware hook %s failed; continuing", fn.__qualname__)
