"""Finding the apps' ``consumers.py``, ``schedules.py`` and ``tasks.py``
(``redisq_django.discovery``, Django's ``autodiscover_modules``): the order they are
imported in, the module a failure names, and the tasks' lookup going on past a broken
app."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from redisq_django.schedules.declared import ScheduleDiscoveryError
from redisq_django.schedules.declared import registry as schedule_registry

#: Builds an importable app package: ``make_app(name, {"module.py": source})``.
MakeApp = Callable[[str, dict[str, str]], str]


@pytest.fixture
def make_app(tmp_path: Path) -> Iterator[MakeApp]:
    """Apps written into a directory on ``sys.path``; removed, and forgotten by
    ``sys.modules``, after the test."""
    made: list[str] = []

    def make(name: str, modules: dict[str, str]) -> str:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
        for module, source in modules.items():
            (tmp_path / name / module).write_text(textwrap.dedent(source))
        made.append(name)
        return name

    sys.path.insert(0, str(tmp_path))
    try:
        yield make
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.split(".")[0] in made]:
            del sys.modules[name]


@pytest.fixture
def fresh_schedules() -> Iterator[None]:
    """The schedule registry discovers again (and forgets what the test declared)."""
    schedule_registry.clear()
    try:
        yield
    finally:
        schedule_registry.clear()


@pytest.mark.usefixtures("fresh_schedules")
def test_schedules_find_every_consumers_py_first_and_name_the_module_that_failed(
    settings: Any, make_app: MakeApp
) -> None:
    # Given an app whose schedules.py fails, listed before one that has a consumers.py
    broken = make_app("brokensched", {"schedules.py": "raise RuntimeError('boom')\n"})
    later = make_app("laterconsumers", {"consumers.py": "IMPORTED = True\n"})
    settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, broken, later]

    # When the schedules are asked for
    with pytest.raises(ScheduleDiscoveryError) as raised:
        schedule_registry.declarations()

    # Then the error names the module and its error, and every app's consumers.py was
    # imported before any schedules.py (a schedule may be declared in consumers.py)
    assert str(raised.value) == "Could not import brokensched.schedules: RuntimeError: boom"
    assert "laterconsumers.consumers" in sys.modules


@pytest.mark.usefixtures("fresh_schedules")
def test_a_schedule_declared_in_an_apps_schedules_py_is_found(
    settings: Any, make_app: MakeApp
) -> None:
    app = make_app(
        "someschedules",
        {
            "schedules.py": """
                from redisq_django.schedules import periodic

                periodic("discovered-report", cron="0 3 * * *", queue="reports", payload=1)
            """
        },
    )
    settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, app]
    assert "discovered-report" in [d.name for d in schedule_registry.declarations()]


def test_a_broken_tasks_py_hides_neither_the_other_apps_tasks_nor_its_error(
    settings: Any, make_app: MakeApp
) -> None:
    pytest.importorskip("django.tasks", reason="django.tasks is Django >= 6.0")
    from redisq_django.tasks import registry

    # Given an app whose tasks.py fails, listed before one that defines a task
    broken = make_app("brokentasks", {"tasks.py": "raise RuntimeError('boom')\n"})
    good = make_app(
        "goodtasks",
        {
            "tasks.py": """
                from django.tasks import task

                @task
                def ping() -> str:
                    return "pong"
            """
        },
    )
    settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, broken, good]
    registry.reset_discovery()
    try:
        # When a worker looks up the good app's task, then a path nobody declared
        found = registry.declared_task("goodtasks.tasks.ping")
        with pytest.raises(registry.UnknownTask) as unknown:
            registry.declared_task("nowhere.tasks.nothing")

        # Then the task is found, and the unknown task's error names the broken module
        assert found.module_path == "goodtasks.tasks.ping"
        assert "brokentasks.tasks failed to import (RuntimeError: boom)" in str(unknown.value)
    finally:
        registry.forget("goodtasks.tasks.ping")
        registry.reset_discovery()
