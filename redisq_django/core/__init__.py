"""Django-free core of redisq: key schema, envelope codec, Lua scripts, broker.

Nothing in this package imports Django; it reads one frozen :class:`CoreConfig`.
Use it directly from any Python program::

    import redis
    from redisq_django.core import Broker

    broker = Broker(redis.Redis())
    broker.ensure_consumer("orders", "billing", start="earliest")
    broker.publish("orders", {"order": 42})
    with broker.subscribe("orders", "billing") as sub:
        for message in sub.fetch(count=10, block_ms=1000):
            ...
            sub.ack([message])
"""

from redisq_django.core.backoff import compute_backoff
from redisq_django.core.broker import Broker
from redisq_django.core.config import CoreConfig
from redisq_django.core.errors import (
    ConfigurationError,
    ConsumerNotFound,
    InvalidName,
    PayloadNotSerializable,
    PayloadTooLarge,
    PublishError,
    RedisqError,
    RedisUnavailable,
)
from redisq_django.core.message import Message
from redisq_django.core.start import StartPoint
from redisq_django.core.stats import ConsumerStats, QueueStats
from redisq_django.core.subscription import Subscription

__all__ = [
    "Broker",
    "ConfigurationError",
    "ConsumerNotFound",
    "ConsumerStats",
    "CoreConfig",
    "InvalidName",
    "Message",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "PublishError",
    "QueueStats",
    "RedisUnavailable",
    "RedisqError",
    "StartPoint",
    "Subscription",
    "compute_backoff",
]
