"""Django-free core of redisq: key schema, envelope, Lua scripts, broker, worker.

Nothing in this package imports Django; it reads one frozen :class:`CoreConfig`.
Use it directly from any Python program::

    import redis
    from redisq_django.core import Broker

    broker = Broker(redis.Redis())
    broker.ensure_consumer("orders", "billing", start="earliest")
    broker.publish("orders", {"order": 42})
    with broker.subscribe("orders", "billing", instance="worker-1") as sub:
        for delivery in sub.fetch(count=10, block_ms=1000):
            handle(delivery.message)  # a Message: payload, headers, attempts, ...
            sub.ack([delivery])
"""

from redisq_django.core.broker import Broker
from redisq_django.core.config import CoreConfig
from redisq_django.core.deadletter import DeadLetter, DeadReason, Failure
from redisq_django.core.delivery import Delivery, Stream
from redisq_django.core.envelope import Envelope, new_message_id
from redisq_django.core.errors import (
    ConfigurationError,
    ConsumerNotFound,
    InvalidName,
    NotRedrivable,
    PayloadNotSerializable,
    PayloadTooLarge,
    ProtocolMismatch,
    PublishError,
    RedisqError,
    RedisRefused,
    RedisUnavailable,
)
from redisq_django.core.groups import default_instance_name
from redisq_django.core.handler import ConsumerSpec, Reject
from redisq_django.core.message import Message
from redisq_django.core.outcome import Outcome
from redisq_django.core.retry import RetryPolicy, compute_backoff
from redisq_django.core.start import StartPoint
from redisq_django.core.stats import ConsumerStats, QueueStats
from redisq_django.core.subscription import Subscription

__all__ = [
    "Broker",
    "ConfigurationError",
    "ConsumerNotFound",
    "ConsumerSpec",
    "ConsumerStats",
    "CoreConfig",
    "DeadLetter",
    "DeadReason",
    "Delivery",
    "Envelope",
    "Failure",
    "InvalidName",
    "Message",
    "NotRedrivable",
    "Outcome",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "ProtocolMismatch",
    "PublishError",
    "QueueStats",
    "RedisRefused",
    "RedisUnavailable",
    "RedisqError",
    "Reject",
    "RetryPolicy",
    "StartPoint",
    "Stream",
    "Subscription",
    "compute_backoff",
    "default_instance_name",
    "new_message_id",
]
