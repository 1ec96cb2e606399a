"""``settings.REDISQ``: defaults, validation, and translation into the core's config.

Read through :func:`get_settings` / :func:`get_core_config`, cached and cleared when
Django's ``setting_changed`` fires (see ``signal_handlers.py``), so ``override_settings``
works in tests. Never read at import time.
"""

from __future__ import annotations

import functools
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from redisq_django.core import bounds
from redisq_django.core import config as core_defaults
from redisq_django.core.config import CoreConfig
from redisq_django.core.errors import ConfigurationError
from redisq_django.core.keys import NAME_RE
from redisq_django.core.retry import RetryPolicy


class SettingsError(ConfigurationError, ImproperlyConfigured):
    """``settings.REDISQ`` is invalid; the message names the key and the fix."""


#: Every key of ``settings.REDISQ`` with its default. Times are in seconds.
DEFAULTS: dict[str, Any] = {
    # Where Redis is: a django-redis cache alias whose client is reused...
    "CONNECTION": "default",
    # ...unless a redis:// or rediss:// URL is given, which then wins.
    "URL": None,
    # True: URL names a node of a Redis Cluster (the client is a redis.cluster.RedisCluster).
    "CLUSTER": False,
    "PREFIX": "redisq",
    "MAX_PAYLOAD_BYTES": core_defaults.DEFAULT_MAX_PAYLOAD_BYTES,
    # The default retry policy of consumers, in seconds (RetryPolicy's own defaults).
    **{k.upper(): v for k, v in RetryPolicy().to_seconds().items()},
    "REPLAY_WINDOW": core_defaults.DEFAULT_REPLAY_WINDOW_MS / 1000,
    "REPLAY_WINDOW_LENGTH": 0,
    "MAX_LENGTH": 0,
    "MAX_AGE": 0,
    "POLL_INTERVAL": core_defaults.DEFAULT_POLL_INTERVAL_MS / 1000,
    "JSON_ENCODER": "django.core.serializers.json.DjangoJSONEncoder",
    # runconsumer: time in-flight handlers get to finish after SIGTERM/SIGINT.
    "SHUTDOWN_GRACE_PERIOD": 30.0,
    # Transactional outbox: False, True (every queue) or a list of queue names.
    "OUTBOX": False,
    # Sent outbox rows are deleted this long after sending, seconds.
    "OUTBOX_RETENTION": 3600.0,
    # Inbox rows of atomic=True consumers are deleted this long after handling, seconds:
    # longer than a message can be delivered again (replay window, retries).
    "INBOX_RETENTION": 7 * 24 * 3600.0,
    # Optional list of the queue names in use; when set, publishing to or declaring a
    # consumer of another queue is an error (catches typos).
    "QUEUES": None,
    # Record lifecycle events with every settle, and keep the log and the events until
    # the archive (manage.py redisq_pipeline archive) has stored them.
    "HISTORY": False,
    # Where the archive writes its Parquet files: a path or a Hadoop URI (s3a://, hdfs://).
    "ARCHIVE_ROOT": None,
    # The name the archive job (manage.py redisq_pipeline archive) registers under in
    # every queue; retention waits for each registered archive.
    "ARCHIVE_NAME": "default",
    # Socket and connect timeout of the admin's Redis calls, seconds (no retries): an
    # admin page answers promptly, with figures shown as unknown, when Redis is sick.
    "ADMIN_REDIS_TIMEOUT": 0.5,
    # The bearer token that lets a scraper read the /metrics view (redisq_django.urls);
    # None: only signed-in users with the redisq_django.view_queue permission may.
    "METRICS_TOKEN": None,
    # OpenTelemetry tracing of publish and handle (the otel extra): trace context in the
    # headers, send/create and process spans.
    "TRACING": False,
    # Per-minute counters (published, handled, failed, retried, dead, handler time) and
    # samples (backlog...) kept in Redis for 48 h: the admin's charts.
    "TRENDS": True,
    # Partitioned queues: queue name -> its number of partitions (1 to 64), each a full
    # queue under a hash tag of its own, spread over a Redis Cluster's masters.
    "PARTITIONS": {},
    # Ordered consumers: replicas each read waits for (WAIT) before its messages run, so
    # that a failover cannot run a key's message again after the key's next one (0: none),
    # and how long it waits at most, seconds (the messages then run all the same).
    "ORDERED_WAIT_REPLICAS": 0,
    "ORDERED_WAIT_TIMEOUT": core_defaults.DEFAULT_ORDERED_WAIT_TIMEOUT_MS / 1000,
}

#: The numeric keys, each checked against its bounds (``core/bounds.py``).
NUMBERS = tuple(key for key in DEFAULTS if key.lower() in bounds.BOUNDS)


def _is_name_list(value: Any) -> bool:
    return isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)


def _validate(user: Any) -> dict[str, Any]:
    if not isinstance(user, dict):
        raise SettingsError(
            f"settings.REDISQ must be a dict, not {type(user).__name__}. "
            'Example: REDISQ = {"URL": "redis://localhost:6379/0"}'
        )
    unknown = sorted(set(user) - set(DEFAULTS))
    if unknown:
        raise SettingsError(
            f"Unknown key(s) in settings.REDISQ: {', '.join(unknown)}. "
            f"Valid keys: {', '.join(DEFAULTS)}."
        )
    merged = {**DEFAULTS, **user}
    problems = [bounds.problem(key.lower(), merged[key], key) for key in NUMBERS]
    url = merged["URL"]
    if url is not None and (
        not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://"))
    ):
        problems.append("URL must be a redis://, rediss:// or unix:// URL")
    if not isinstance(merged["CLUSTER"], bool):
        problems.append("CLUSTER must be True or False")
    elif merged["CLUSTER"] and (not isinstance(url, str) or not url.startswith("redis")):
        problems.append("CLUSTER needs URL: the redis:// or rediss:// URL of a cluster node")
    if not isinstance(merged["CONNECTION"], str) or not merged["CONNECTION"]:
        problems.append("CONNECTION must be the alias of a django-redis cache in CACHES")
    prefix = merged["PREFIX"]
    if not isinstance(prefix, str) or not prefix or any(c in prefix for c in "{} "):
        problems.append("PREFIX must be a non-empty string without braces or spaces")
    outbox = merged["OUTBOX"]
    if not isinstance(outbox, bool) and not _is_name_list(outbox):
        problems.append("OUTBOX must be True, False or a list of queue names")
    for flag in ("HISTORY", "TRACING", "TRENDS"):
        if not isinstance(merged[flag], bool):
            problems.append(f"{flag} must be True or False")
    token = merged["METRICS_TOKEN"]
    if token is not None and (not isinstance(token, str) or len(token) < 16):
        problems.append("METRICS_TOKEN must be None or a string of at least 16 characters")
    root = merged["ARCHIVE_ROOT"]
    if root is not None and (not isinstance(root, str) or not root):
        problems.append("ARCHIVE_ROOT must be None or a path or URI (a non-empty string)")
    name = merged["ARCHIVE_NAME"]
    if not isinstance(name, str) or not NAME_RE.match(name):
        problems.append("ARCHIVE_NAME must be a name: 1-100 letters, digits, '_', '.' or '-'")
    queues = merged["QUEUES"]
    if queues is not None and not _is_name_list(queues):
        problems.append("QUEUES must be None or a list of queue names")
    problems += _partition_problems(merged["PARTITIONS"])
    found = [p for p in problems if p]
    if found:
        raise SettingsError("Invalid settings.REDISQ: " + "; ".join(found) + ".")
    return merged


def _partition_problems(partitions: Any) -> list[str | None]:
    if not isinstance(partitions, dict):
        return [
            'PARTITIONS must be a dict of queue name -> number of partitions, e.g. {"orders": 4}'
        ]
    found: list[str | None] = []
    for queue, count in partitions.items():
        if not isinstance(queue, str) or not NAME_RE.match(queue):
            found.append(f"PARTITIONS: {queue!r} is no queue name (letters, digits, '_', '.', '-')")
        else:
            found.append(bounds.problem("partitions_per_queue", count, f"PARTITIONS[{queue!r}]"))
    return found


@functools.cache
def get_settings() -> dict[str, Any]:
    """``settings.REDISQ`` merged over :data:`DEFAULTS` and validated.

    Raises:
        SettingsError: a key is unknown or a value is invalid.
    """
    from django.conf import settings

    return _validate(getattr(settings, "REDISQ", {}))


@functools.cache
def get_core_config() -> CoreConfig:
    """The core's frozen config built from ``settings.REDISQ``."""
    s = get_settings()
    try:
        encoder = import_string(s["JSON_ENCODER"])
    except ImportError as exc:
        raise SettingsError(
            f"settings.REDISQ['JSON_ENCODER'] = {s['JSON_ENCODER']!r} cannot be imported: {exc}"
        ) from exc
    return CoreConfig(
        prefix=s["PREFIX"],
        max_payload_bytes=s["MAX_PAYLOAD_BYTES"],
        retry=RetryPolicy.from_seconds(
            max_retries=s["MAX_RETRIES"],
            backoff=s["BACKOFF"],
            max_backoff=s["MAX_BACKOFF"],
            visibility_timeout=s["VISIBILITY_TIMEOUT"],
        ),
        replay_window_ms=int(s["REPLAY_WINDOW"] * 1000),
        replay_window_len=s["REPLAY_WINDOW_LENGTH"],
        max_len=s["MAX_LENGTH"],
        max_age_ms=int(s["MAX_AGE"] * 1000),
        poll_interval_ms=max(1, int(s["POLL_INTERVAL"] * 1000)),
        json_encoder=encoder,
        history=s["HISTORY"],
        trends=s["TRENDS"],
        partitions=dict(s["PARTITIONS"]),
        ordered_wait_replicas=s["ORDERED_WAIT_REPLICAS"],
        ordered_wait_timeout_ms=max(1, int(s["ORDERED_WAIT_TIMEOUT"] * 1000)),
    )


def outbox_enabled(queue: str) -> bool:
    """Whether messages for ``queue`` go through the transactional outbox."""
    outbox = get_settings()["OUTBOX"]
    return outbox is True or (isinstance(outbox, list | tuple) and queue in outbox)


def check_queue_known(queue: str) -> None:
    """Raise when ``REDISQ['QUEUES']`` is set and does not list ``queue``.

    Raises:
        SettingsError: naming the queue and the known ones.
    """
    known = get_settings()["QUEUES"]
    if known is not None and queue not in known:
        raise SettingsError(
            f"Queue {queue!r} is not in settings.REDISQ['QUEUES'] ({', '.join(known)}). "
            "Add it there or fix the name."
        )


def clear_caches() -> None:
    """Forget the cached settings and config (``signal_handlers`` calls it, and also
    clears the broker built from them)."""
    get_settings.cache_clear()
    get_core_config.cache_clear()
