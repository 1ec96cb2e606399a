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
    """No-op hooks the worker calls around each message."""

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


class MiddlewareChain:
    """Calls a hook on every middleware, logging (not raising) their failures."""

    def __init__(self, middleware: Sequence[Middleware]) -> None:
        self.middleware = list(middleware)

    def call(self, hook: str, *args: Any, **kwargs: Any) -> None:
        for mw in self.middleware:
            try:
                getattr(mw, hook)(*args, **kwargs)
            except Exception:
                logger.exception("Middleware %s.%s failed; continuing", type(mw).__name__, hook)
