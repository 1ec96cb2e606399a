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

from __future__ import annotations

import warnings
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the real names, for type checkers and IDEs
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


#: Where each public name lives. Imported when first used (PEP 562): a Spark executor that
#: needs the key schema and the archives does not pay for the worker, the operator and
#: the asyncio client (about 0.2 s of CPU per Python process).
_WHERE = {
    "Broker": "redisq_django.core.broker",
    "ConfigurationError": "redisq_django.core.errors",
    "ConsumerNotFound": "redisq_django.core.errors",
    "ConsumerSpec": "redisq_django.core.handler",
    "ConsumerStats": "redisq_django.core.stats",
    "CoreConfig": "redisq_django.core.config",
    "CorruptState": "redisq_django.core.errors",
    "DeadEntry": "redisq_django.core.dead_entry",
    "DeadReason": "redisq_django.core.dead_entry",
    "Delivery": "redisq_django.core.delivery",
    "Envelope": "redisq_django.core.envelope",
    "Failure": "redisq_django.core.dead_entry",
    "InvalidKey": "redisq_django.core.errors",
    "InvalidName": "redisq_django.core.errors",
    "LayoutRefused": "redisq_django.core.errors",
    "Message": "redisq_django.core.message",
    "NotRedrivable": "redisq_django.core.errors",
    "Outcome": "redisq_django.core.outcome",
    "PartitionedQueueError": "redisq_django.core.errors",
    "PartitionsMismatch": "redisq_django.core.errors",
    "PayloadNotSerializable": "redisq_django.core.errors",
    "PayloadTooLarge": "redisq_django.core.errors",
    "Place": "redisq_django.core.partitions",
    "ProtocolMismatch": "redisq_django.core.errors",
    "PublishError": "redisq_django.core.errors",
    "QueueStats": "redisq_django.core.stats",
    "RedisRefused": "redisq_django.core.errors",
    "RedisUnavailable": "redisq_django.core.errors",
    "RedisqError": "redisq_django.core.errors",
    "Reject": "redisq_django.core.handler",
    "RetryPolicy": "redisq_django.core.retry",
    "Settlement": "redisq_django.core.outcome",
    "StartPoint": "redisq_django.core.start",
    "Stream": "redisq_django.core.delivery",
    "Subscription": "redisq_django.core.subscription",
    "compute_backoff": "redisq_django.core.retry",
    "default_instance_name": "redisq_django.core.groups",
    "new_message_id": "redisq_django.core.ids",
    "partition_of": "redisq_django.core.partitions",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is not None:
        value = getattr(import_module(module), name)
        globals()[name] = value  # later look-ups skip __getattr__
        return value
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
        return __getattr__("DeadEntry")
    raise AttributeError(f"module 'redisq_django.core' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
