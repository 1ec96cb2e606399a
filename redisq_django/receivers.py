"""Signal receivers, connected once from ``AppConfig.ready()``."""

from __future__ import annotations

import logging
from typing import Any

from django.db.models.signals import post_migrate

logger = logging.getLogger("redisq")


def _sync_after_migrate(sender: Any, using: str = "default", **kwargs: Any) -> None:
    if getattr(sender, "name", None) != "redisq_django":
        return
    from redisq_django.registry import DiscoveryError
    from redisq_django.sync import sync_declarations

    try:
        sync_declarations()
    except DiscoveryError as exc:
        # migrate must not fail because an app's consumers.py is broken; the system
        # check and runconsumer report it.
        logger.warning("Consumers not synchronised: %s", exc)


def connect() -> None:
    """Connect every receiver of the app (idempotent: dispatch_uid)."""
    post_migrate.connect(_sync_after_migrate, dispatch_uid="redisq_sync_after_migrate")
