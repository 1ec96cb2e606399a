"""Django's Tasks framework (``django.tasks``, Django 6.0 and newer) on redisq queues.

``TASKS = {"default": {"BACKEND": "redisq_django.tasks.RedisqBackend", "QUEUES":
["default"], "OPTIONS": {...}}}``; workers: ``manage.py runconsumer --tasks``. See
README.md, "Django Tasks".
"""

from __future__ import annotations

import django

if django.VERSION < (6, 0):  # pragma: no cover - exercised on Django 5.2 only
    raise ImportError(
        "redisq_django.tasks needs Django 6.0 or newer (django.tasks); this is Django "
        f"{django.get_version()}. Upgrade Django to use the tasks backend."
    )

from redisq_django.tasks.backend import RedisqBackend, RedisqTask
from redisq_django.tasks.once import enqueue_once

__all__ = ["RedisqBackend", "RedisqTask", "enqueue_once"]
