"""Django-free core of redisq: key schema, envelope, Lua scripts, broker, worker.

Nothing in this package imports Django; it reads one frozen :class:`CoreConfig`.
Use it directly from any Python program::

    import redis
    from redisq_django.core import Broker

    broker = Broker(redis.Redis())
    broker.consumers.ensure("orders", "billing", start="earliest")
    broker.publish("orders", {"order": 42})
    with broker.subscribe("orders", "billing", instance="worker-1") as sub:
        for delivery in sub.fetch(count=10, block_ms=1000):
            handle(delivery.message)  # a Message: payload, headers, attempts, ...
            sub.ack([delivery])
"""

import warnings
from typing import Any

from redisq_django.core.broker import Broker
from redisq_django.core.config import CoreConfig
from redisq_django.core.dead_entry import DeadEntry, DeadReason, Failure
from redisq_django.core.delivery import Delivery, Stream
from redisq_django.core.envelope import Envelope
from redisq_django.core.errors import (
    ConfigurationError,
    ConsumerNotFound,
    CorruptState,
    InvalidKey,
    InvalidName,
    LayoutRefused,
    NotRedrivable,
    PartitionedQueueError,
    PartitionsMismatch,
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
from redisq_django.core.ids import new_message_id
from redisq_django.core.message import Message
from redisq_django.core.outcome import Outcome, Settlement
from redisq_django.core.partitions import Place, partition_of
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
    "CorruptState",
    "DeadEntry",
    "DeadReason",
    "Delivery",
    "Envelope",
    "Failure",
    "InvalidKey",
    "InvalidName",
    "LayoutRefused",
    "Message",
    "NotRedrivable",
    "Outcome",
    "PartitionedQueueError",
    "PartitionsMismatch",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "Place",
    "ProtocolMismatch",
    "PublishError",
    "QueueStats",
    "RedisRefused",
    "RedisUnavailable",
    "RedisqError",
    "Reject",
    "RetryPolicy",
    "Settlement",
    "StartPoint",
    "Stream",
    "Subscription",
    "compute_backoff",
    "default_instance_name",
    "new_message_id",
    "partition_of",
]


def __getattr__(name: str) -> Any:
    # The Redis entry was ``DeadLetter`` too, like the database row: kept one minor
    # version under its old name, with a warning that says where it went.
    if name == "DeadLetter":
        warnings.warn(
            "redisq_django.core.DeadLetter is now redisq_django.core.DeadEntry (a dead "
            "letter as stored in Redis; the database row is redisq_django.models.DeadLetter). "
            "The old name is removed in the next minor version: import DeadEntry.",
            DeprecationWarning,
            stacklevel=2,
        )
        return DeadEntry
    raise AttributeError(f"module 'redisq_django.core' has no attribute {name!r}")
