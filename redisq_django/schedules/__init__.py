"""Periodic schedules: ``periodic`` declarations and ``Schedule`` rows, evaluated by every
``runconsumer`` (no beat process), each tick published exactly once.

Public API: :func:`periodic` (``from redisq_django.schedules import periodic``). Imported
lazily (PEP 562), so that importing this package in a ``tasks.py`` loads nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from redisq_django.schedules.declared import periodic
    from redisq_django.schedules.timing import Missed, ScheduleError

__all__ = ["Missed", "ScheduleError", "periodic"]

_WHERE = {
    "periodic": "redisq_django.schedules.declared",
    "Missed": "redisq_django.schedules.timing",
    "ScheduleError": "redisq_django.schedules.timing",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
