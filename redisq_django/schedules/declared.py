"""``periodic``: schedules declared in code, and their discovery in each app's
``schedules.py`` and ``tasks.py`` (and ``consumers.py``)."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

import django

from redisq_django import discovery
from redisq_django.schedules.spec import (
    QueueTarget,
    ScheduleSpec,
    Target,
    TaskTarget,
    catch_up_to_ms,
    check_name,
)
from redisq_django.schedules.timing import (
    DEFAULT_CATCH_UP_MS,
    Missed,
    ScheduleError,
    Timing,
    every_to_ms,
)

T = TypeVar("T")

#: The modules of each installed app imported to find ``periodic`` declarations
#: (``tasks.py`` from Django 6.0 on: before, it holds no Django task to schedule and
#: may import ``django.tasks``, which does not exist then).
DISCOVERED_MODULES = ("schedules", "tasks") if django.VERSION >= (6, 0) else ("schedules",)


@dataclass(frozen=True)
class ScheduleDeclaration:
    """A schedule as declared in code; ``timezone`` None means ``settings.TIME_ZONE``."""

    name: str
    cron: str | None
    every_ms: int | None
    timezone: str | None
    target: Target
    missed: Missed = Missed.LATEST
    catch_up_ms: int = DEFAULT_CATCH_UP_MS

    def spec(self, default_timezone: str) -> ScheduleSpec:
        """The runtime spec, in ``default_timezone`` unless the declaration names one."""
        timing = Timing(self.cron, self.every_ms, self.timezone or default_timezone)
        return ScheduleSpec(self.name, timing, self.target, self.missed, self.catch_up_ms)


@overload
def periodic(
    name: str,
    *,
    cron: str | None = ...,
    every: dt.timedelta | float | None = ...,
    timezone: str | None = ...,
    queue: str,
    payload: Any = ...,
    missed: str = ...,
    catch_up: dt.timedelta | float = ...,
) -> ScheduleDeclaration: ...


@overload
def periodic(
    name: str | None = ...,
    *,
    cron: str | None = ...,
    every: dt.timedelta | float | None = ...,
    timezone: str | None = ...,
    args: tuple[Any, ...] | list[Any] = ...,
    kwargs: dict[str, Any] | None = ...,
    missed: str = ...,
    catch_up: dt.timedelta | float = ...,
) -> Callable[[T], T]: ...


def periodic(
    name: str | None = None,
    *,
    cron: str | None = None,
    every: dt.timedelta | float | None = None,
    timezone: str | None = None,
    queue: str | None = None,
    payload: Any = None,
    args: tuple[Any, ...] | list[Any] = (),
    kwargs: dict[str, Any] | None = None,
    missed: str = Missed.LATEST,
    catch_up: dt.timedelta | float = DEFAULT_CATCH_UP_MS / 1000,
) -> Any:
    """Declare a periodic schedule: a message published, or a task enqueued, each tick.

    With ``queue=``, publishes ``payload`` to that queue each tick (``name`` required)::

        periodic("nightly-report", cron="0 3 * * *", queue="reports", payload={"kind": "daily"})

    Without, decorates a Django ``@task`` (put ``@periodic`` above ``@task``), enqueued
    each tick with ``args``/``kwargs``; ``name`` defaults to the task's dotted path::

        @periodic(every=timedelta(minutes=5))
        @task
        def refresh_rates(): ...

    Every ``runconsumer`` evaluates the schedules and each tick is published once,
    however many run. The rows in the admin (``Schedule``) are written from these
    declarations; staff may change a declared schedule's timing or disable it there.

    Args:
        name: unique schedule name (letters, digits, ``_ . -``).
        cron: a cron expression (5 fields, or 6 with seconds first), matched in
            ``timezone``; DST rules as in :mod:`redisq_django.schedules.timing`.
        every: an interval (timedelta or seconds, at least 1 s), ticks aligned to the
            Unix epoch. Exactly one of ``cron`` and ``every``.
        timezone: IANA time zone of ``cron`` (default ``settings.TIME_ZONE``).
        queue: publish to this queue each tick; ``payload``: the message (plain JSON).
        args, kwargs: the task's arguments (plain JSON).
        missed: after downtime, ``"latest"`` fires the most recent missed tick once,
            ``"skip"`` fires none later than ``catch_up``, ``"all"`` fires every tick at
            most ``catch_up`` old.
        catch_up: the bound of ``missed`` (timedelta or seconds; default 60 s).

    Raises:
        ScheduleError: an invalid timing, time zone, target or name.
    """
    missed_value = _missed(missed)
    catch_up_ms = catch_up_to_ms(catch_up)
    every_ms = every_to_ms(every) if every is not None else None
    Timing(cron, every_ms, timezone or "UTC")  # validate now, where it is written

    def declare(schedule_name: str, target: Target) -> ScheduleDeclaration:
        check_name("schedule", schedule_name)
        declaration = ScheduleDeclaration(
            schedule_name, cron, every_ms, timezone, target, missed_value, catch_up_ms
        )
        registry.add(declaration)
        return declaration

    if queue is not None:
        if name is None:
            raise ScheduleError("periodic(queue=...) needs a schedule name as first argument.")
        if args or kwargs:
            raise ScheduleError("args= and kwargs= are for task schedules; use payload=.")
        return declare(name, QueueTarget(queue, payload))
    if payload is not None:
        raise ScheduleError("payload= goes with queue=; a task schedule takes args=/kwargs=.")

    def decorate(task: T) -> T:
        path = getattr(task, "module_path", None)
        if not isinstance(path, str) or not callable(getattr(task, "enqueue", None)):
            raise ScheduleError(
                f"@periodic decorates a Django task, not {task!r}: put it above @task "
                "(django.tasks), or pass queue= to publish a message instead."
            )
        declare(name or path, TaskTarget(path, tuple(args), dict(kwargs or {})))
        _declare_task(task)
        return task

    return decorate


def _declare_task(task: Any) -> None:
    """A scheduled ``django.tasks`` Task is one of the project's declared tasks, which a
    worker runs by path (``redisq_django.tasks.registry``)."""
    if django.VERSION < (6, 0):
        return
    from django.tasks import Task

    if isinstance(task, Task):
        from redisq_django.tasks.registry import declare as declare_task

        declare_task(task)


def _missed(value: str) -> Missed:
    try:
        return Missed(value)
    except ValueError:
        raise ScheduleError(
            f"missed= must be one of {', '.join(m.value for m in Missed)}, not {value!r}."
        ) from None


class ScheduleDiscoveryError(ScheduleError):
    """An app's ``schedules.py``, ``tasks.py`` or ``consumers.py`` failed to import."""


class ScheduleRegistry:
    """The ``periodic`` declarations of a process. One instance, :data:`registry`."""

    def __init__(self) -> None:
        self._declarations: dict[str, ScheduleDeclaration] = {}
        self._lock = threading.Lock()
        self._discovered = False

    def add(self, declaration: ScheduleDeclaration) -> None:
        """Record a declaration (the same one again is a no-op).

        Raises:
            ScheduleError: another declaration already has this name.
        """
        with self._lock:
            existing = self._declarations.get(declaration.name)
            if existing is not None and existing != declaration:
                raise ScheduleError(
                    f"Schedule {declaration.name!r} is declared twice, differently. "
                    "Give one of them another name."
                )
            self._declarations[declaration.name] = declaration

    def autodiscover(self) -> None:
        """Import ``consumers.py``, then ``schedules.py`` and ``tasks.py``, of every
        installed app, once (:func:`redisq_django.discovery.autodiscover`).

        Raises:
            ScheduleDiscoveryError: naming the module that failed to import.
        """
        if self._discovered:
            return
        # A schedule may be declared in consumers.py too; every app's consumers.py is
        # imported first, as the consumer registry does it, then the others.
        discovery.autodiscover("consumers", error=ScheduleDiscoveryError)
        discovery.autodiscover(*DISCOVERED_MODULES, error=ScheduleDiscoveryError)
        self._discovered = True

    def declarations(self) -> list[ScheduleDeclaration]:
        """Every declared schedule (after :meth:`autodiscover`), sorted by name."""
        self.autodiscover()
        with self._lock:
            return sorted(self._declarations.values(), key=lambda d: d.name)

    def remove(self, name: str) -> None:
        """Forget one declaration (for tests)."""
        with self._lock:
            self._declarations.pop(name, None)

    def clear(self) -> None:
        """Forget all declarations (for tests)."""
        with self._lock:
            self._declarations.clear()
        self._discovered = False


#: The schedule declarations of this process.
registry = ScheduleRegistry()


def declarations() -> list[ScheduleDeclaration]:
    """Every declared schedule, sorted (see :data:`registry`)."""
    return registry.declarations()
