"""The admin log (Django's ``LogEntry``, shown as each object's *History*: who changed
what, when) of operator actions taken outside the admin's own views, kept where
``django.contrib.admin`` is installed. (Not the lifecycle history of messages, which
``REDISQ["HISTORY"]`` turns on: that one is in Redis.)

The admin is optional (a worker-only service has none), and its models cannot even be
imported without it: this is the one module outside ``admin/`` that touches them, and
only once :func:`is_kept` said they are there. ``manage.py redisq`` and the shared
operations write through it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import apps
from django.db.models import Model


def is_kept() -> bool:
    """Whether this project keeps the admin history (``django.contrib.admin`` installed)."""
    return apps.is_installed("django.contrib.admin")


def log_change(user: Any, rows: Sequence[Model], text: str, *, single_object: bool = False) -> bool:
    """Record ``text`` as a change of ``rows`` by ``user`` (one entry per row).

    Returns:
        False, writing nothing, when the history is not kept (see :func:`is_kept`).
    """
    if not is_kept():
        return False
    from django.contrib.admin.models import CHANGE, LogEntry

    if single_object:  # one entry, as the admin's own change views write it
        LogEntry.objects.log_actions(user.pk, rows, CHANGE, text, single_object=True)
    else:
        LogEntry.objects.log_actions(user.pk, rows, CHANGE, text)
    return True
