"""What a schedule is at run time (:class:`ScheduleSpec`): its timing, its target and how
it catches up; the id of each tick's message (:func:`tick_id`)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from redisq_django.core.clock import ms_to_datetime
from redisq_django.core.envelope import MAX_ID_LENGTH
from redisq_django.core.errors import InvalidName
from redisq_django.core.keys import validate_name
from redisq_django.schedules.timing import DEFAULT_CATCH_UP_MS, Missed, ScheduleError, Timing

#: Headers of a scheduled message: the schedule's name and the tick's time (ISO 8601 UTC).
HEADER_SCHEDULE = "schedule"
HEADER_TICK = "scheduled_for"


def tick_id(name: str, tick_ms: int) -> str:
    """The message id of ``name``'s tick at ``tick_ms``: the same in every worker, so
    publishing it at most once per id publishes each tick once.

    ``"<name>@<ms>"``; a name too long for a message id is shortened and made unique
    with 8 hex digits of its SHA-256 (``"<first 36>~<hash>@<ms>"``).
    """
    text = f"{name}@{tick_ms}"
    if len(text) <= MAX_ID_LENGTH:
        return text
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:36]}~{digest}@{tick_ms}"


def check_name(kind: str, name: str) -> str:
    """``name`` when it is a valid schedule or queue name (as ``core.keys`` allows).

    Raises:
        ScheduleError: it is not.
    """
    try:
        return validate_name(kind, name)
    except InvalidName as exc:
        raise ScheduleError(str(exc)) from None


def _check_json(what: str, value: Any) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ScheduleError(
            f"{what} must be plain JSON (it is stored in the database): {exc}"
        ) from None


@dataclass(frozen=True)
class QueueTarget:
    """Publish ``payload`` to ``queue`` each tick."""

    queue: str
    payload: Any = None

    def __post_init__(self) -> None:
        check_name("queue", self.queue)
        _check_json("payload=", self.payload)

    def describe(self) -> str:
        return f"queue {self.queue}"


@dataclass(frozen=True)
class TaskTarget:
    """Enqueue the Django task at dotted ``path`` with ``args``/``kwargs`` each tick."""

    path: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or "." not in self.path:
            raise ScheduleError(f"A task target is a dotted path, not {self.path!r}.")
        if not isinstance(self.kwargs, dict):
            raise ScheduleError("kwargs= of a task schedule must be a dict.")
        _check_json("args=", list(self.args))
        _check_json("kwargs=", self.kwargs)

    def describe(self) -> str:
        return f"task {self.path}"

    def payload(self) -> dict[str, Any]:
        """How a task target's arguments are stored (the ``payload`` column)."""
        return {"args": list(self.args), "kwargs": dict(self.kwargs)}

    @classmethod
    def from_payload(cls, path: str, payload: Any) -> TaskTarget:
        """A task target from ``path`` and a stored ``{"args": [...], "kwargs": {...}}``.

        Raises:
            ScheduleError: the payload is not of that shape.
        """
        payload = {} if payload is None else payload
        if not isinstance(payload, dict) or set(payload) - {"args", "kwargs"}:
            raise ScheduleError(
                'The payload of a task schedule is {"args": [...], "kwargs": {...}} '
                "(both optional)."
            )
        args, kwargs = payload.get("args", []), payload.get("kwargs", {})
        if not isinstance(args, list):
            raise ScheduleError('"args" of a task schedule must be a JSON list.')
        return cls(path, tuple(args), kwargs)


Target = QueueTarget | TaskTarget


@dataclass(frozen=True)
class ScheduleSpec:
    """A periodic schedule as workers run it.

    Attributes:
        name: unique; part of each tick's message id.
        timing: when it ticks.
        target: what each tick publishes or enqueues.
        missed: which due ticks fire when it is evaluated late (see ``Timing.due``).
        catch_up_ms: the bound of ``missed`` (how late for ``SKIP``, how old for ``ALL``).
        enabled: whether it fires at all.
        since_ms: ticks at or before this never fire (when it was created, re-timed or
            enabled again: ticks of a time it did not exist, or was off, are not missed).
        last_run_ms: the last tick recorded in the database (0: none); never fired again
            even if Redis lost its state.
    """

    name: str
    timing: Timing
    target: Target
    missed: Missed = Missed.LATEST
    catch_up_ms: int = DEFAULT_CATCH_UP_MS
    enabled: bool = True
    since_ms: int = 0
    last_run_ms: int = 0

    def __post_init__(self) -> None:
        check_name("schedule", self.name)
        object.__setattr__(self, "missed", Missed(self.missed))
        if self.catch_up_ms < 0:
            raise ScheduleError("catch_up= must not be negative.")

    @property
    def floor_ms(self) -> int:
        """Ticks at or before this never fire (whatever Redis says)."""
        return max(self.since_ms, self.last_run_ms)

    def headers(self, tick_ms: int) -> dict[str, str]:
        """The headers of the message of tick ``tick_ms``."""
        return {HEADER_SCHEDULE: self.name, HEADER_TICK: ms_to_datetime(tick_ms).isoformat()}

    def describe(self) -> str:
        return f"{self.name} ({self.timing.describe()} -> {self.target.describe()})"


def catch_up_to_ms(catch_up: dt.timedelta | float | int) -> int:
    """``catch_up=`` (a timedelta or seconds) in ms.

    Raises:
        ScheduleError: not a non-negative duration.
    """
    if isinstance(catch_up, dt.timedelta):
        ms = catch_up // dt.timedelta(milliseconds=1)
    elif isinstance(catch_up, int | float) and not isinstance(catch_up, bool):
        ms = int(catch_up * 1000)
    else:
        raise ScheduleError(f"catch_up= must be a timedelta or seconds, not {catch_up!r}.")
    if ms < 0:
        raise ScheduleError("catch_up= must not be negative.")
    return ms


def target_of(queue: str, task: str, payload: Any) -> Target:
    """The target stored in a row's ``queue``, ``task`` and ``payload`` columns.

    Raises:
        ScheduleError: both or neither of ``queue`` and ``task``, or a bad payload.
    """
    if bool(queue) == bool(task):
        raise ScheduleError("A schedule targets either a queue or a task (one of the two).")
    if queue:
        return QueueTarget(queue, payload)
    return TaskTarget.from_payload(task, payload)


def target_columns(target: Target) -> dict[str, Any]:
    """A target as a row's ``queue``, ``task`` and ``payload`` columns."""
    if isinstance(target, QueueTarget):
        return {"queue": target.queue, "task": "", "payload": target.payload}
    return {"queue": "", "task": target.path, "payload": target.payload()}
