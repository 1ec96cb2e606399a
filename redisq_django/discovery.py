"""Finding what the installed apps declare in their ``consumers.py``, ``schedules.py`` and
``tasks.py``, by importing those modules (Django's ``autodiscover_modules``)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from types import ModuleType

from django.apps import apps
from django.utils.module_loading import autodiscover_modules, module_has_submodule


def autodiscover(*module_names: str, error: type[Exception]) -> None:
    """Import the modules ``module_names`` of every installed app that has them (app by
    app in ``INSTALLED_APPS`` order, each app's in the order given), as Django's
    ``autodiscover_modules`` does, and name the module that failed.

    Raises:
        error: "Could not import app.module: ExceptionType: message", from the exception
            of the first module that failed to import (the ones before it are imported).
    """
    try:
        autodiscover_modules(*module_names)
    except Exception as exc:
        failed = _first_missing(module_names) or "an app's " + " or ".join(module_names)
        raise error(f"Could not import {failed}: {type(exc).__name__}: {exc}") from exc


def _first_missing(module_names: tuple[str, ...]) -> str | None:
    """The first app module (in discovery order) that exists but was not imported: the
    one that failed, since a failed import leaves no entry in ``sys.modules``."""
    for name in _app_modules(module_names):
        if name not in sys.modules:
            return name
    return None


def import_each(module_name: str) -> tuple[list[ModuleType], list[str]]:
    """Import the module ``module_name`` of every installed app that has it, going on past
    the ones that fail (a worker still knows the other apps' declarations).

    Returns:
        The modules imported, and a problem per module that failed
        ("app.module failed to import (ExceptionType: message)").
    """
    modules: list[ModuleType] = []
    problems: list[str] = []
    for name in _app_modules((module_name,)):
        try:
            modules.append(importlib.import_module(name))
        except Exception as exc:  # the app's own module: its error is reported, not raised
            problems.append(f"{name} failed to import ({type(exc).__name__}: {exc})")
    return modules, problems


def _app_modules(module_names: tuple[str, ...]) -> Iterator[str]:
    """The dotted name of each existing module ``module_names`` of the installed apps, in
    discovery order."""
    for app_config in apps.get_app_configs():
        for module_name in module_names:
            if module_has_submodule(app_config.module, module_name):
                yield f"{app_config.name}.{module_name}"
