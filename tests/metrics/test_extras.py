"""The metrics and otel extras are optional: no module imports prometheus-client or
OpenTelemetry at its top, only ``redisq_django.metrics`` imports them at all, and without
them everything else works while the features that need them say what to install."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.test_structure import MODULES, _imports

OPTIONAL = {"prometheus_client", "opentelemetry"}


def _top_level_imports(path: Path) -> set[str]:
    """Root packages imported by statements at the top of a module (what importing it
    runs; ``if TYPE_CHECKING:`` blocks excluded)."""
    out: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            out |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


def test_only_the_metrics_package_imports_them_and_never_at_module_top() -> None:
    importers = {
        name
        for name, path in MODULES.items()
        if {m.split(".")[0] for m in _imports(name, path)} & OPTIONAL
    }
    assert importers  # the check sees them...
    assert {n for n in importers if not n.startswith("redisq_django.metrics.")} == set()
    # ...and none at module top (importing any module never needs the extras)
    assert {n for n, path in MODULES.items() if _top_level_imports(path) & OPTIONAL} == set()


PROGRAM = textwrap.dedent(
    """
    import importlib.abc, io, sys

    class Missing(importlib.abc.MetaPathFinder):
        # As if the metrics and otel extras were not installed.
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("prometheus_client", "opentelemetry"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Missing())

    import django
    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.core.management.base import CommandError
    from django.test import Client
    from django.test.utils import override_settings
    import redisq_django.metrics.views, redisq_django.metrics.prometheus
    import redisq_django.metrics.tracing, redisq_django.metrics.exporter

    call_command("migrate", verbosity=0)  # an in-memory database of its own
    from redisq_django import publish
    publish("faults", {"n": 1})  # publishing works without either

    # runconsumer --metrics-port names the extra, in one line
    try:
        call_command("runconsumer", "faults", "--burst", "--metrics-port", "0")
    except CommandError as exc:
        message = str(exc)
    else:
        raise AssertionError("runconsumer --metrics-port ran without prometheus-client")
    assert "pip install 'redisq-django[metrics]'" in message, message

    # the view answers 501 with the same advice
    url = settings.REDISQ["URL"]
    with override_settings(REDISQ={"URL": url, "METRICS_TOKEN": "x" * 20}):
        response = Client().get("/redisq/metrics", headers={"Authorization": "Bearer " + "x" * 20})
    assert response.status_code == 501, response.status_code
    assert b"redisq-django[metrics]" in response.content

    # TRACING on without the API: manage.py check reports it...
    from django.core import checks
    with override_settings(REDISQ={"URL": url, "TRACING": True}):
        ids = [m.id for m in checks.run_checks()]
    assert "redisq_django.E020" in ids, ids

    # ...and publishing says which extra is missing
    from redisq_django.metrics.extras import MissingExtra
    with override_settings(REDISQ={"URL": url, "TRACING": True}):
        try:
            publish("faults", {"n": 2})
        except MissingExtra as exc:
            assert "pip install 'redisq-django[otel]'" in str(exc), str(exc)
        else:
            raise AssertionError("TRACING worked without opentelemetry-api")
    assert not [m for m in sys.modules if m.split(".")[0] in ("prometheus_client", "opentelemetry")]
    print("ok")
    """
)


@pytest.mark.slow  # a fresh Python process
def test_without_the_extras_the_features_say_what_to_install(redis_url: str) -> None:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "REDISQ_TEST_URL": redis_url,
        "PYTHONPATH": root,
    }
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
