"""The tasks a project declared, by dotted path: the only ones a worker runs.

A task message names its task by path (``"shop.tasks.send_receipt"``), and anyone who
can write to Redis can write one; so can staff typing a schedule's task in the admin.
Importing that path would run the import-time code of any installed module they
choose. Instead a path is looked up among the tasks this process declared:

- every ``@task`` of a redisq backend, as it is created (``RedisqBackend.validate_task``
  records it), whatever module defines it;
- every task an installed app's ``tasks.py`` defines or imports, and every task
  ``@periodic`` decorates: :func:`discover` imports each app's ``tasks.py`` (Django's
  convention, as ``consumers.py``), once, when a path is not known yet.

A path found nowhere is an :class:`UnknownTask`; no module is ever imported because a
message or a form named it.
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any

from django.tasks import Task

from redisq_django import discovery
from redisq_django.core.errors import RedisqError

#: The module of each installed app imported to find its tasks.
TASKS_MODULE = "tasks"

_lock = threading.Lock()
#: Held while the apps' tasks.py are imported: a thread that misses a path meanwhile
#: waits for the discovery to end instead of finding it half done.
_discovering = threading.RLock()
_tasks: dict[str, Task[..., Any]] = {}
_discovery: dict[str, Any] = {"done": False, "error": None}


class UnknownTask(RedisqError, LookupError):
    """A task path names no task this process declared (nothing was imported)."""


def declare(task: Task[..., Any]) -> None:
    """Record ``task`` under its dotted path (the first one stays: ``.using()`` copies
    share its function; a module imported again replaces it)."""
    path = task.module_path
    with _lock:
        known = _tasks.get(path)
        if known is None or known.func is not task.func:
            _tasks[path] = task


def declare_module(module: ModuleType) -> None:
    """Record every task ``module`` defines or imports (its module-level ``Task``s)."""
    for value in list(vars(module).values()):
        if isinstance(value, Task):
            declare(value)


def discover() -> None:
    """Import every installed app's ``tasks.py`` and record its tasks, once per process.

    An app whose ``tasks.py`` fails to import is remembered (the error of an unknown
    task names it), and the other apps' tasks are still recorded.
    """
    with _discovering:
        if _discovery["done"]:
            return
        # Not autodiscover(): it stops at the first app that fails, and the worker
        # would then refuse the tasks of the apps after it.
        modules, errors = discovery.import_each(TASKS_MODULE)
        for module in modules:
            declare_module(module)
        _discovery.update(done=True, error="; ".join(errors) or None)


def declared_task(path: str) -> Task[..., Any]:
    """The declared task at dotted ``path``.

    Raises:
        UnknownTask: no task of this process has that path (never imported from it).
    """
    task = _tasks.get(path)
    if task is None:
        discover()
        task = _tasks.get(path)
    if task is None:
        raise UnknownTask(_unknown(path))
    return task


def _unknown(path: str) -> str:
    broken = _discovery["error"]
    return (
        f"Task {path!r} is not declared in this process: no installed app's tasks.py "
        "defines or imports it, and no code run here created it. A worker runs only its "
        "project's tasks and never imports a module a message names: define the task in "
        "an app's tasks.py (or import it there)." + (f" Note: {broken}." if broken else "")
    )


def forget(path: str) -> None:
    """Forget the task at ``path`` (for tests)."""
    with _lock:
        _tasks.pop(path, None)


def reset_discovery() -> None:
    """Let the next :func:`declared_task` miss import the apps' ``tasks.py`` again (for
    tests that change ``INSTALLED_APPS``)."""
    with _discovering:
        _discovery.update(done=False, error=None)
