"""System checks (``manage.py check``) for redisq settings."""

from __future__ import annotations

from typing import Any

from django.core import checks

from redisq_django.conf import SettingsError, get_core_config, get_settings


@checks.register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """redisq_django.E001: ``settings.REDISQ`` is invalid."""
    try:
        get_settings()
        get_core_config()
    except SettingsError as exc:
        return [
            checks.Error(
                str(exc),
                hint="Fix settings.REDISQ; docs/reference/settings.md lists its keys and defaults.",
                id="redisq_django.E001",
            )
        ]
    return []


@checks.register()
def check_connection(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """redisq_django.E005: without ``REDISQ['URL']``, ``REDISQ['CONNECTION']`` names a
    cache that ``CACHES`` lacks or that is not django-redis (with no ``REDISQ`` at all,
    Django's default cache, a ``LocMemCache``). Builds the client, never connects."""
    from redisq_django.connection import cache_client

    try:
        configured = get_settings()
    except SettingsError:
        return []  # reported by E001
    if configured["URL"]:
        return []
    try:
        cache_client(configured["CONNECTION"])
    except SettingsError as exc:
        return [
            checks.Error(
                str(exc),
                hint="runconsumer, manage.py redisq, the admin and publish() refuse with "
                "this line until it is fixed; docs/reference/settings.md (CONNECTION, URL).",
                id="redisq_django.E005",
            )
        ]
    return []


@checks.register()
def check_consumers(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """redisq_django.E002: an app's ``consumers.py`` fails to import."""
    from redisq_django.consuming.declarations import DiscoveryError, autodiscover

    try:
        autodiscover()
    except DiscoveryError as exc:
        return [
            checks.Error(
                str(exc),
                hint="Fix the import error; runconsumer cannot start until it imports.",
                id="redisq_django.E002",
            )
        ]
    return []


@checks.register()
def check_consumer_queues(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """redisq_django.E003: a consumer is declared for a queue ``REDISQ['QUEUES']`` lacks."""
    from redisq_django.consuming.declarations import DiscoveryError, declarations

    try:
        known = get_settings()["QUEUES"]
        decls = declarations()
    except (SettingsError, DiscoveryError):
        return []  # reported by E001 / E002
    if known is None:
        return []
    return [
        checks.Error(
            f"Consumer {d.name!r} ({d.handler_path}) is declared for queue {d.queue!r}, "
            f"which settings.REDISQ['QUEUES'] does not list.",
            hint=f"Add {d.queue!r} to REDISQ['QUEUES'] or fix the queue name in @consumer.",
            id="redisq_django.E003",
        )
        for d in decls
        # Task queues (declared from TASKS, with a priority level) are not listed there.
        if d.queue not in known and d.priority is None
    ]


@checks.register()
def check_tracing_extra(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """redisq_django.E020: ``REDISQ['TRACING']`` is on, but opentelemetry-api is missing."""
    from redisq_django.metrics.extras import MissingExtra, opentelemetry_trace

    try:
        if not get_settings()["TRACING"]:
            return []
        opentelemetry_trace()
    except SettingsError:
        return []  # reported by E001
    except MissingExtra as exc:
        return [
            checks.Error(
                str(exc),
                hint="Install the extra, or set REDISQ['TRACING'] to False.",
                id="redisq_django.E020",
            )
        ]
    return []


@checks.register(deploy=True)
def check_redis_reachable(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """redisq_django.E004 (``check --deploy``): Redis cannot be reached."""
    from redisq_django.connection import get_broker

    try:
        get_settings()
        broker = get_broker()
    except SettingsError:
        return []  # reported by E001 / E005
    try:
        broker.operator.ping()
    except Exception as exc:
        return [
            checks.Error(
                f"Cannot reach Redis at {broker.where}: {exc}",
                hint="Start Redis or point REDISQ['URL'] / REDISQ['CONNECTION'] at it.",
                id="redisq_django.E004",
            )
        ]
    return []


#: System check ids of the Redis server's shortcomings
#: (``core.operator.server.ServerProblem.code``).
SERVER_CHECK_IDS = {
    "eviction": "redisq_django.W010",
    "no_aof": "redisq_django.W011",
    "aof_fsync": "redisq_django.W012",
    "old_version": "redisq_django.W013",
    "config_unreadable": "redisq_django.I014",
}


@checks.register(deploy=True)
def check_redis_server(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """redisq_django.W010-W013, I014 (``check --deploy``): the Redis server evicts keys,
    runs without AOF (or with ``appendfsync no``), is older than 6.2, or refuses
    ``CONFIG GET`` so that none of this can be checked."""
    from redisq_django.connection import get_broker

    try:
        get_settings()
        problems = get_broker().operator.server_problems()
    except Exception:
        return []  # bad settings or Redis unreachable: reported by E001 / E005 / E004
    out: list[checks.CheckMessage] = []
    for p in problems:
        check_id = SERVER_CHECK_IDS[p.code]
        kind = checks.Info if check_id.split(".")[1].startswith("I") else checks.Warning
        out.append(kind(p.message, hint=p.hint, id=check_id))
    return out


@checks.register()
def check_inbox_retention(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """redisq_django.W021: an ``atomic=True`` consumer's message can be delivered again
    after its inbox row is pruned: ``REDISQ['INBOX_RETENTION']`` is shorter than the
    replay window or than the consumer's longest retry schedule."""
    from redisq_django.consuming.declarations import DiscoveryError, declarations
    from redisq_django.consuming.inbox import redelivery_horizon

    try:
        configured = get_settings()
        atomic = [d for d in declarations() if d.atomic is not None]
    except (SettingsError, DiscoveryError):
        return []  # reported by E001 / E002
    kept = float(configured["INBOX_RETENTION"])
    out: list[checks.CheckMessage] = []
    for d in atomic:
        horizon, why = redelivery_horizon(d, configured)
        if kept < horizon:
            out.append(
                checks.Warning(
                    f"Consumer {d.queue}/{d.name} is atomic=True, but its inbox rows are "
                    f"deleted after {kept:g} s (REDISQ['INBOX_RETENTION']) while a message "
                    f"can be delivered again up to {horizon:g} s later ({why}); such a "
                    "message would run its handler again.",
                    hint=f"Set REDISQ['INBOX_RETENTION'] to at least {horizon:g}, or shorten "
                    "the replay window or the retries.",
                    id="redisq_django.W021",
                )
            )
    return out
