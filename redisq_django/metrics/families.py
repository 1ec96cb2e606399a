"""Every metric we export: name, type, labels, help text (and histogram buckets).

Named by the Prometheus conventions: a ``redisq_`` prefix, base units (seconds), ``_total``
on counters, labels for the dimensions an operator filters on (``queue``, ``consumer``
= the logical consumer, ``outcome``) and never one that grows without bound (no message
id, no instance name). docs/reference/metrics.md's table is checked against :data:`ALL`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from redisq_django.core.outcome import Outcome


class Kind(StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class Family:
    """One metric family.

    Attributes:
        name: the family name; counters carry ``_total`` here, as exposed (the Python
            client adds it itself: :attr:`client_name` is the name without it).
        kind: counter, gauge or histogram.
        labels: its label names, in order.
        help: the help text.
        source: ``worker`` (counted by the handler threads, served by ``runconsumer
            --metrics-port``) or ``redis`` (read from Redis at scrape time, served by the
            Django view).
    """

    name: str
    kind: Kind
    labels: tuple[str, ...]
    help: str
    source: str

    @property
    def client_name(self) -> str:
        return self.name.removesuffix("_total") if self.kind is Kind.COUNTER else self.name


QC = ("queue", "consumer")

# -- the worker's (runconsumer --metrics-port) -------------------------------------------

MESSAGES = Family(
    "redisq_messages_total",
    Kind.COUNTER,
    (*QC, "outcome"),
    "Deliveries settled by this worker, by outcome: handled (acknowledged), retried "
    "(failed, scheduled again), dead (became a dead letter, also taken over past its "
    "deliveries or undecodable), lost (another instance took "
    "it over meanwhile).",
    "worker",
)
FAILURES = Family(
    "redisq_handler_failures_total",
    Kind.COUNTER,
    QC,
    "Handler runs that raised (a Reject is not counted here, only as outcome dead).",
    "worker",
)
DUPLICATES = Family(
    "redisq_duplicates_skipped_total",
    Kind.COUNTER,
    QC,
    "Deliveries of messages an atomic=True consumer had handled already (its inbox had "
    "them): acknowledged without running the handler again.",
    "worker",
)
RECLAIMED = Family(
    "redisq_messages_reclaimed_total",
    Kind.COUNTER,
    QC,
    "Messages this worker took over from stopped or timed-out instances.",
    "worker",
)
REPLICA_WAIT_TIMEOUTS = Family(
    "redisq_replica_wait_timeouts_total",
    Kind.COUNTER,
    QC,
    "Reads of an ordered consumer with wait_replicas whose messages went out although "
    "fewer replicas than asked confirmed them in time (WAIT timed out).",
    "worker",
)
DURATION = Family(
    "redisq_handler_duration_seconds",
    Kind.HISTOGRAM,
    QC,
    "How long handlers ran, failed runs included.",
    "worker",
)
LATENCY = Family(
    "redisq_message_latency_seconds",
    Kind.HISTOGRAM,
    QC,
    "From publish (for delayed messages: from their due time) until the handler "
    "returned, retries included; handled messages only (whole milliseconds).",
    "worker",
)

#: Outcomes of :data:`MESSAGES`, as the worker's tally names them.
OUTCOMES = tuple(outcome.counted_as for outcome in Outcome)
#: Handler durations: 1 ms to 5 min (seconds).
DURATION_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    math.inf,
)
#: End-to-end latencies: 5 ms to 1 h (seconds); retries with backoff land in the tail.
LATENCY_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
    math.inf,
)

# -- read from Redis at scrape time (the Django view) ------------------------------------

REDIS_UP = Family(
    "redisq_redis_up",
    Kind.GAUGE,
    (),
    "1 when Redis answered this scrape, 0 when it could not be reached in time (the "
    "other redisq gauges are then missing).",
    "redis",
)
UNREADABLE = Family(
    "redisq_unreadable_queues",
    Kind.GAUGE,
    (),
    "Queues whose figures this scrape could not read: a member of the queue registry "
    "that is no queue name (another client wrote it), or a queue whose records refused "
    "to be read. Only their own series are missing; the view logs each once.",
    "redis",
)
QUEUE_LENGTH = Family(
    "redisq_queue_length",
    Kind.GAUGE,
    ("queue",),
    "Entries in the queue's log, including acknowledged ones kept for replay (not a "
    "backlog: see redisq_backlog_messages).",
    "redis",
)
DELAYED = Family(
    "redisq_delayed_messages",
    Kind.GAUGE,
    ("queue",),
    "Delayed messages not yet due.",
    "redis",
)
PUBLISHED = Family(
    "redisq_published_messages_total",
    Kind.COUNTER,
    ("queue",),
    "Messages appended to the queue's log since it was created (delayed ones once due); "
    "from Redis 7 on (XINFO STREAM entries-added), missing before.",
    "redis",
)
DROPPED = Family(
    "redisq_dropped_messages_total",
    Kind.COUNTER,
    ("queue",),
    "Unacknowledged messages removed by the hard cap (MAX_LENGTH / MAX_AGE).",
    "redis",
)
ARCHIVE_LAG = Family(
    "redisq_archive_lag_messages",
    Kind.GAUGE,
    ("queue",),
    "Log entries the named archive furthest behind has not stored yet (capped at "
    "10,000; with HISTORY on and no archive registered, the whole log); missing when "
    "history is off and no archive is registered.",
    "redis",
)
BACKLOG = Family(
    "redisq_backlog_messages",
    Kind.GAUGE,
    QC,
    "Messages waiting to be delivered to the consumer now: new log entries not yet read, "
    "plus retries and re-drives due in its private input.",
    "redis",
)
PENDING = Family(
    "redisq_pending_messages",
    Kind.GAUGE,
    QC,
    "Deliveries in flight: fetched by an instance, not yet acknowledged.",
    "redis",
)
OLDEST_PENDING = Family(
    "redisq_oldest_pending_age_seconds",
    Kind.GAUGE,
    QC,
    "Age of the oldest delivery in flight (publish time, or when a retry or re-drive "
    "was queued); 0 when none.",
    "redis",
)
OLDEST_UNDELIVERED = Family(
    "redisq_oldest_undelivered_age_seconds",
    Kind.GAUGE,
    QC,
    "Age of the oldest log entry not yet delivered to the consumer; 0 when none.",
    "redis",
)
RETRYING = Family(
    "redisq_retrying_messages",
    Kind.GAUGE,
    QC,
    "Failed messages waiting for their backoff before the next attempt.",
    "redis",
)
DEAD = Family(
    "redisq_dead_letters",
    Kind.GAUGE,
    QC,
    "Dead letters not retried or discarded: rows in the database plus entries still in "
    "Redis on their way there.",
    "redis",
)
INSTANCES = Family(
    "redisq_instances_alive",
    Kind.GAUGE,
    QC,
    "Instances (handler threads) of the consumer with a live heartbeat.",
    "redis",
)
PAUSED = Family(
    "redisq_consumer_paused",
    Kind.GAUGE,
    QC,
    "1 when the consumer is paused in the admin, else 0.",
    "redis",
)
SLOTS_IN_USE = Family(
    "redisq_slots_in_use",
    Kind.GAUGE,
    QC,
    "Slots of the consumer's max_in_flight limit held by running handlers, across every "
    "worker (0 when it has no limit).",
    "redis",
)
RATE_AHEAD = Family(
    "redisq_rate_limit_ahead_seconds",
    Kind.GAUGE,
    QC,
    "How far ahead of now the consumer's rate limit has given out tokens (0: its bucket is "
    "full, or it has no limit); from (burst - 1) / rate on, messages wait for the rate.",
    "redis",
)

#: Every family, worker's first.
ALL = (
    MESSAGES,
    FAILURES,
    DUPLICATES,
    RECLAIMED,
    REPLICA_WAIT_TIMEOUTS,
    DURATION,
    LATENCY,
    REDIS_UP,
    UNREADABLE,
    QUEUE_LENGTH,
    DELAYED,
    PUBLISHED,
    DROPPED,
    ARCHIVE_LAG,
    BACKLOG,
    PENDING,
    OLDEST_PENDING,
    OLDEST_UNDELIVERED,
    RETRYING,
    DEAD,
    INSTANCES,
    PAUSED,
    SLOTS_IN_USE,
    RATE_AHEAD,
)
