"""redisq_django: reliable message queues on the Redis your Django site already runs.

Publish with :func:`publish` / :func:`publish_many`; the Django-free core lives in
:mod:`redisq_django.core`.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["Message", "Reject", "consumer", "publish", "publish_many", "publish_on_commit"]

# Django-free names, safe to import before settings are configured.
from redisq_django.core.handler import Reject
from redisq_django.core.message import Message
from redisq_django.registry import consumer


def publish(queue: str, payload: Any, **kwargs: Any) -> str:
    """Publish one message; see :func:`redisq_django.publishing.publish`."""
    from redisq_django.publishing import publish as _publish

    return _publish(queue, payload, **kwargs)


def publish_many(queue: str, payloads: Any, **kwargs: Any) -> list[str]:
    """Publish a batch in one round trip; see :func:`redisq_django.publishing.publish_many`."""
    from redisq_django.publishing import publish_many as _publish_many

    return _publish_many(queue, payloads, **kwargs)


def publish_on_commit(queue: str, payload: Any, **kwargs: Any) -> str:
    """Publish after the transaction commits; see
    :func:`redisq_django.publishing.publish_on_commit`."""
    from redisq_django.publishing import publish_on_commit as _publish_on_commit

    return _publish_on_commit(queue, payload, **kwargs)
