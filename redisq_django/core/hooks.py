"""Hooks around publishing, for cross-cutting behaviour such as tracing.

A :class:`PublishHook` is given to the :class:`~redisq_django.core.Broker`. Every path
that publishes (``publish``, ``publish_many``, ``prepare`` then ``send`` as
``publish_on_commit``, model events and the outbox do) builds each message in
``Broker.prepare``, so :meth:`PublishHook.before_prepare` sees every message once, before
its headers are encoded. ``publish`` and ``publish_many``, which send at once, also run
inside :meth:`PublishHook.sending`. Both are no-ops by default.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any


class PublishHook:
    """No-op hooks the broker calls around publishing."""

    def sending(self, queue: str, count: int) -> AbstractContextManager[Any]:
        """Wraps the preparation and the sending of ``count`` messages of ``queue`` by
        ``publish`` or ``publish_many`` (an exception there propagates through it).

        A context manager (e.g. a ``@contextlib.contextmanager`` method); the default is
        a shared no-op, so that a hook without it costs a publish no generator.
        """
        return _NOTHING

    def before_prepare(
        self, queue: str, headers: Mapping[str, Any] | None
    ) -> Mapping[str, Any] | None:
        """The headers a message of ``queue`` is to carry, given the caller's.

        Return them unchanged, or a new mapping; never change the caller's mapping.
        Called once per message, in the publishing thread.
        """
        return headers


_NOTHING: AbstractContextManager[Any] = contextlib.nullcontext()


def sending(hooks: Sequence[PublishHook], queue: str, count: int) -> AbstractContextManager[Any]:
    """Every hook's :meth:`PublishHook.sending`, the first one outermost."""
    if not hooks:  # the common case: no generator to build on the publishing path
        return _NOTHING
    if len(hooks) == 1:
        return hooks[0].sending(queue, count)
    stack = contextlib.ExitStack()
    try:
        for hook in hooks:
            stack.enter_context(hook.sending(queue, count))
    except BaseException:
        stack.close()  # leave the ones entered
        raise
    return stack
