"""Signal receivers, connected once from ``AppConfig.ready()``."""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.core.signals import setting_changed
from django.db.models.signals import post_migrate

logger = logging.getLogger("redisq")


def clear_caches(*, setting: str, **kwargs: Any) -> None:
    """Forget cached settings, config and broker after ``REDISQ`` or ``CACHES`` change
    (``override_settings`` in tests)."""
    if setting not in ("REDISQ", "CACHES"):
        return
    from redisq_django import conf, connection

    conf.clear_caches()
    connection.get_broker.cache_clear()
    connection.quick_client.cache_clear()
    # The admin's live figures came from the old broker; never import the admin for it.
    admin_live = sys.modules.get("redisq_django.admin.live")
    if admin_live is not None:
        admin_live.clear()


def sync_after_migrate(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """Write the ``@consumer`` and ``periodic`` declarations into ``Queue``/``Consumer``
    and ``Schedule`` rows after our app's migrations ran, and register the declared
    consumers in Redis, so that they receive what is published from now on even before
    their first worker runs (``consuming/registration.py``)."""
    if getattr(sender, "name", None) != "redisq_django":
        return
    from redisq_django.consuming.consumer_sync import sync_declarations
    from redisq_django.consuming.declarations import DiscoveryError
    from redisq_django.consuming.registration import register_after_migrate
    from redisq_django.core.errors import ConfigurationError
    from redisq_django.schedules.schedule_sync import sync_schedules

    try:
        sync_declarations()
    except DiscoveryError as exc:
        # migrate must not fail because an app's consumers.py is broken; the system
        # check and runconsumer report it.
        logger.warning("Consumers not synchronised: %s", exc)
    else:
        # migrate passes its plan; flush (a TransactionTestCase's teardown) does not, and
        # emptying a database is no deploy: Redis is left alone then.
        if "plan" in kwargs:
            register_after_migrate()  # never fails migrate: a warning when Redis is away
    try:
        sync_schedules()
    except ConfigurationError as exc:  # a broken schedules.py, a queue not in QUEUES
        logger.warning("Schedules not synchronised: %s", exc)


def connect() -> None:
    """Connect every receiver of the app (idempotent: dispatch_uid)."""
    setting_changed.connect(clear_caches, dispatch_uid="redisq_clear_caches")
    post_migrate.connect(sync_after_migrate, dispatch_uid="redisq_sync_after_migrate")
