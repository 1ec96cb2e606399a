"""The frozen configuration object the core reads (never Django settings)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from redisq_django.core.codec import PayloadEncoder

#: Largest encoded payload accepted by ``publish`` (bytes): 1 MiB.
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
#: Retries after the first attempt before a message becomes a dead letter.
DEFAULT_MAX_RETRIES = 5
#: Base of the exponential retry backoff (seconds).
DEFAULT_BACKOFF_S = 1.0
#: Upper bound of one retry backoff (seconds).
DEFAULT_MAX_BACKOFF_S = 300.0
#: A fetched message not acked within this time is delivered again (milliseconds).
DEFAULT_VISIBILITY_TIMEOUT_MS = 60_000
#: Acknowledged history kept for replay (milliseconds): 1 hour.
DEFAULT_REPLAY_WINDOW_MS = 3_600_000
#: How often an idle fetch looks for due delayed messages and retries (milliseconds).
DEFAULT_POLL_INTERVAL_MS = 50
#: At most this many due entries are promoted, or log entries trimmed, per script call.
DEFAULT_SCRIPT_BATCH = 1000


@dataclass(frozen=True)
class CoreConfig:
    """Everything the core needs to know, fixed for the life of a :class:`Broker`.

    Attributes:
        prefix: first part of every key (``redisq``).
        max_payload_bytes: largest encoded payload ``publish`` accepts.
        max_retries: default retries before a message is dead.
        backoff_s: default base of the exponential backoff, seconds.
        max_backoff_s: default cap of one backoff, seconds.
        visibility_timeout_ms: default lease of a fetched message, milliseconds.
        replay_window_ms: acknowledged history kept for replay, milliseconds (0: none).
        replay_window_len: acknowledged entries kept for replay, counted from the newest
            (0: none). The larger of the two windows wins.
        max_len: hard cap on the log length (0: none). May drop unacknowledged messages;
            each drop is counted in ``QueueStats.dropped``.
        max_age_ms: hard cap on the age of log entries, milliseconds (0: none). Same caveat.
        poll_interval_ms: how often a waiting fetch checks for due delayed messages.
        script_batch: bound on the entries one script call promotes or trims.
        json_encoder: encoder class for payloads and headers.
    """

    prefix: str = "redisq"
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    max_retries: int = DEFAULT_MAX_RETRIES
    backoff_s: float = DEFAULT_BACKOFF_S
    max_backoff_s: float = DEFAULT_MAX_BACKOFF_S
    visibility_timeout_ms: int = DEFAULT_VISIBILITY_TIMEOUT_MS
    replay_window_ms: int = DEFAULT_REPLAY_WINDOW_MS
    replay_window_len: int = 0
    max_len: int = 0
    max_age_ms: int = 0
    poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS
    script_batch: int = DEFAULT_SCRIPT_BATCH
    json_encoder: type[json.JSONEncoder] = field(default=PayloadEncoder)

    def __post_init__(self) -> None:
        problems = []
        if not self.prefix or any(c in self.prefix for c in "{} "):
            problems.append(f"prefix {self.prefix!r} must be non-empty, without braces/spaces")
        for name in ("max_payload_bytes", "poll_interval_ms", "script_batch"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0")
        for name in (
            "max_retries",
            "backoff_s",
            "max_backoff_s",
            "visibility_timeout_ms",
            "replay_window_ms",
            "replay_window_len",
            "max_len",
            "max_age_ms",
        ):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0")
        if problems:
            from redisq_django.core.errors import ConfigurationError

            raise ConfigurationError("Invalid redisq configuration: " + "; ".join(problems))
