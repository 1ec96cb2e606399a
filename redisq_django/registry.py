"""``@consumer`` declarations and their discovery in each app's ``consumers.py``."""

from __future__ import annotations

import datetime as dt
import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from redisq_django.core._util import number_problem
from redisq_django.core.errors import ConfigurationError
from redisq_django.core.handler import Handler
from redisq_django.core.keys import validate_name
from redisq_django.core.start import StartPoint

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Declaration:
    """A logical consumer as declared in code by :func:`consumer`.

    Times are in seconds; ``None`` means "the ``REDISQ`` setting's default".
    """

    queue: str
    name: str
    handler: Handler
    handler_path: str
    max_retries: int | None = None
    backoff: float | None = None
    max_backoff: float | None = None
    visibility_timeout: float | None = None
    concurrency: int = 1
    start: str | dt.datetime = "latest"

    @property
    def key(self) -> tuple[str, str]:
        return (self.queue, self.name)


_declarations: dict[tuple[str, str], Declaration] = {}
_lock = threading.Lock()
_discovered = False


def _check_number(name: str, value: Any, *, integer: bool, positive: bool = False) -> None:
    problem = (
        None if value is None else number_problem(name, value, integer=integer, positive=positive)
    )
    if problem:
        raise ConfigurationError(f"@consumer {problem}")


def consumer(
    queue: str,
    *,
    name: str | None = None,
    max_retries: int | None = None,
    backoff: float | None = None,
    max_backoff: float | None = None,
    visibility_timeout: float | None = None,
    concurrency: int = 1,
    start: str | dt.datetime = "latest",
) -> Callable[[F], F]:
    """Declare ``handler(message)`` as logical consumer ``name`` of ``queue``.

    Put it in an installed app's ``consumers.py``; ``manage.py runconsumer QUEUE`` finds
    it there. The handler receives a :class:`~redisq_django.core.Message`. Returning
    acknowledges the message; raising retries it with exponential backoff, up to
    ``max_retries`` times, then makes it a dead letter; raising
    :class:`~redisq_django.Reject` makes it a dead letter at once. Handlers must be
    idempotent: delivery is at least once.

    Args:
        queue: the queue name.
        name: the logical consumer's name (default: the function's name). Each logical
            consumer receives every message of the queue.
        max_retries: retries after the first delivery (default ``REDISQ['MAX_RETRIES']``).
        backoff: base of the exponential backoff with jitter, seconds.
        max_backoff: cap of one backoff wait, seconds.
        visibility_timeout: seconds a delivery may stay unacknowledged before another
            instance gets it (the worker extends it while the handler runs).
        concurrency: handler threads per ``runconsumer`` process.
        start: where the consumer starts when first registered: ``"latest"``,
            ``"earliest"``, an aware datetime or a message id.
    """
    validate_name("queue", queue)
    _check_number("max_retries", max_retries, integer=True)
    _check_number("backoff", backoff, integer=False)
    _check_number("max_backoff", max_backoff, integer=False)
    _check_number("visibility_timeout", visibility_timeout, integer=False, positive=True)
    _check_number("concurrency", concurrency, integer=True, positive=True)
    StartPoint.parse(start)

    def decorate(handler: F) -> F:
        consumer_name = validate_name("consumer", name or handler.__name__)
        path = f"{handler.__module__}.{handler.__qualname__}"
        declaration = Declaration(
            queue=queue,
            name=consumer_name,
            handler=handler,
            handler_path=path,
            max_retries=max_retries,
            backoff=backoff,
            max_backoff=max_backoff,
            visibility_timeout=visibility_timeout,
            concurrency=concurrency,
            start=start,
        )
        with _lock:
            existing = _declarations.get(declaration.key)
            if existing is not None and existing.handler_path != path:
                raise ConfigurationError(
                    f"Consumer {consumer_name!r} of queue {queue!r} is declared twice: by "
                    f"{existing.handler_path} and by {path}. Give one of them another name=."
                )
            _declarations[declaration.key] = declaration
        return handler

    return decorate


class DiscoveryError(ConfigurationError):
    """An app's ``consumers.py`` failed to import."""


def autodiscover() -> None:
    """Import ``consumers.py`` of every installed app (once per process).

    Raises:
        DiscoveryError: naming the module and the error, when one fails to import.
    """
    global _discovered
    if _discovered:
        return
    from django.apps import apps

    for app_config in apps.get_app_configs():
        module = f"{app_config.name}.consumers"
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                continue  # the app has no consumers.py
            raise DiscoveryError(f"Could not import {module}: {exc}") from exc
        except Exception as exc:
            raise DiscoveryError(f"Could not import {module}: {type(exc).__name__}: {exc}") from exc
    _discovered = True


def declarations() -> list[Declaration]:
    """Every declared logical consumer (after :func:`autodiscover`), sorted."""
    autodiscover()
    with _lock:
        return sorted(_declarations.values(), key=lambda d: d.key)


def clear() -> None:
    """Forget all declarations (for tests)."""
    global _discovered
    with _lock:
        _declarations.clear()
    _discovered = False
