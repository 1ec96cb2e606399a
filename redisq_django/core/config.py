"""The frozen configuration object the core reads (never Django settings)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from redisq_django.core.errors import ConfigurationError
from redisq_django.core.json import PayloadEncoder
from redisq_django.core.partitions import MAX_PARTITIONS
from redisq_django.core.retry import RetryPolicy

#: Largest encoded payload accepted by ``publish`` (bytes): 1 MiB.
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
#: Acknowledged history kept for replay (milliseconds): 1 hour.
DEFAULT_REPLAY_WINDOW_MS = 3_600_000
#: How often an idle fetch looks for due delayed messages and retries (milliseconds).
DEFAULT_POLL_INTERVAL_MS = 50
#: At most this many due entries are promoted, or log entries trimmed, per script call.
DEFAULT_SCRIPT_BATCH = 1000
#: How long an ordered consumer's read waits for its replicas at most (milliseconds).
DEFAULT_ORDERED_WAIT_TIMEOUT_MS = 1000


@dataclass(frozen=True)
class CoreConfig:
    """Everything the core needs to know, fixed for the life of a :class:`Broker`.

    Attributes:
        prefix: first part of every key (``redisq``).
        max_payload_bytes: largest encoded payload ``publish`` accepts.
        retry: the default :class:`RetryPolicy` of logical consumers (max retries,
            backoff, cap, visibility timeout).
        replay_window_ms: acknowledged history kept for replay, milliseconds (0: none).
        replay_window_len: acknowledged entries kept for replay, counted from the newest
            (0: none). The larger of the two windows wins.
        max_len: hard cap on the log length (0: none). May drop unacknowledged messages;
            each drop is counted in ``QueueStats.dropped``.
        max_age_ms: hard cap on the age of log entries, milliseconds (0: none). Same caveat.
        poll_interval_ms: how often a waiting fetch checks for due delayed messages.
        script_batch: bound on the entries one script call promotes or trims.
        json_encoder: encoder class for payloads and headers.
        history: record lifecycle events (``core/lifecycle.py``) with every settle, and
            keep the log and events until the archive has stored them.
        trends: keep per-minute counters (``core/trends.py``), each written in the same
            round trip as the publish, acknowledgement or settle it counts.
        partitions: queue name -> its number of partitions K (2 to
            :data:`~redisq_django.core.partitions.MAX_PARTITIONS`; a queue not named has
            1: one hash tag, today's layout). See ``core/partitions/``.
        ordered_wait_replicas: the replicas an ordered consumer's read waits for
            (``WAIT``) before its messages run, unless the consumer says otherwise
            (0: none; ``core/ordered.py``).
        ordered_wait_timeout_ms: how long such a read waits at most; its messages then
            run all the same.
    """

    prefix: str = "redisq"
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    replay_window_ms: int = DEFAULT_REPLAY_WINDOW_MS
    replay_window_len: int = 0
    max_len: int = 0
    max_age_ms: int = 0
    poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS
    script_batch: int = DEFAULT_SCRIPT_BATCH
    json_encoder: type[json.JSONEncoder] = field(default=PayloadEncoder)
    history: bool = False
    trends: bool = True
    # Not hashed: a mapping is not hashable (and no config is hashed for its partitions).
    partitions: Mapping[str, int] = field(default_factory=dict, hash=False)
    ordered_wait_replicas: int = 0
    ordered_wait_timeout_ms: int = DEFAULT_ORDERED_WAIT_TIMEOUT_MS

    def __post_init__(self) -> None:
        problems = list(self.retry.problems())
        if not self.prefix or any(c in self.prefix for c in "{} "):
            problems.append(f"prefix {self.prefix!r} must be non-empty, without braces/spaces")
        for name in (
            "max_payload_bytes",
            "poll_interval_ms",
            "script_batch",
            "ordered_wait_timeout_ms",
        ):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0")
        for name in (
            "replay_window_ms",
            "replay_window_len",
            "max_len",
            "max_age_ms",
            "ordered_wait_replicas",
        ):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0")
        for queue, k in self.partitions.items():
            if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_PARTITIONS:
                problems.append(f"partitions of {queue!r} must be 1 to {MAX_PARTITIONS}, got {k!r}")
        if problems:
            raise ConfigurationError("Invalid redisq configuration: " + "; ".join(problems))
