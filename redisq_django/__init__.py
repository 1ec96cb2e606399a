"""redisq_django: reliable message queues on the Redis your Django site already runs.

The public API is imported lazily (PEP 562), so ``import redisq_django`` needs neither
Django settings nor Redis: declare consumers with :func:`consumer` and schedules with
:func:`periodic`, publish with :func:`publish`, :func:`publish_many` and
:func:`publish_on_commit` (from async code: :func:`apublish`, :func:`apublish_many`),
and catch the errors below (every one a :class:`RedisqError`).
The Django-free core lives in :mod:`redisq_django.core`; docs/layout.md lists the public
names.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.9.0"

__all__ = [
    "ArchiveNotRegistered",
    "ConfigurationError",
    "ConsumerNotFound",
    "Message",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "ProtocolMismatch",
    "PublishError",
    "RedisRefused",
    "RedisUnavailable",
    "RedisqError",
    "Reject",
    "apublish",
    "apublish_many",
    "consumer",
    "periodic",
    "publish",
    "publish_many",
    "publish_on_commit",
]

#: The errors a user catches, all in the core (``redisq_django.core.errors``).
_ERRORS = (
    "ArchiveNotRegistered",
    "ConfigurationError",
    "ConsumerNotFound",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "ProtocolMismatch",
    "PublishError",
    "RedisRefused",
    "RedisUnavailable",
    "RedisqError",
)

if TYPE_CHECKING:  # the real signatures, for type checkers and IDEs
    from redisq_django.consuming.declarations import consumer
    from redisq_django.core.errors import (
        ArchiveNotRegistered,
        ConfigurationError,
        ConsumerNotFound,
        PayloadNotSerializable,
        PayloadTooLarge,
        ProtocolMismatch,
        PublishError,
        RedisqError,
        RedisRefused,
        RedisUnavailable,
    )
    from redisq_django.core.handler import Reject
    from redisq_django.core.message import Message
    from redisq_django.publishing import (
        apublish,
        apublish_many,
        publish,
        publish_many,
        publish_on_commit,
    )
    from redisq_django.schedules import periodic

_WHERE = {
    "Message": "redisq_django.core.message",
    "Reject": "redisq_django.core.handler",
    "apublish": "redisq_django.publishing",
    "apublish_many": "redisq_django.publishing",
    "consumer": "redisq_django.consuming.declarations",
    "publish": "redisq_django.publishing",
    "publish_many": "redisq_django.publishing",
    "publish_on_commit": "redisq_django.publishing",
    "periodic": "redisq_django.schedules",
    **dict.fromkeys(_ERRORS, "redisq_django.core.errors"),
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'redisq_django' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
