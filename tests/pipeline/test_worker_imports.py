"""What a Spark Python worker imports to run the ``redisq`` data source stays light
(issue 37, point 4): a worker on a busy host starts in time only if its imports are few.

Spark unpickles the data source (``redisq_django.pipeline.datasource``) in its
driver-side runner and the readers and writers (``streaming``, ``reading``, ``writer``)
in its executors' workers. None of them needs Django, pandas, the broker with the whole
core behind it, or the jobs' driver-side modules. Checked in a fresh interpreter, by
module names rather than by time (a loaded test machine makes times meaningless)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.pipeline.archive_support import REPO

#: What no worker-side module may import (prefixes of module names).
HEAVY = (
    "django",
    "pandas",
    "redisq_django.core.broker",  # and with it the operator, the subscription, tasks...
    "redisq_django.core.operator",
    "redisq_django.core.subscription",
    "redisq_django.core.worker",
    "redisq_django.core.asyncio_client",
    "redisq_django.core.tasks",
    "redisq_django.pipeline.archive",
    "redisq_django.pipeline.session",
    "redisq_django.pipeline.cli",
    "redisq_django.pipeline.report",
    "redisq_django.pipeline.replay",
    "redisq_django.pipeline.compact",
)


def imported_by(module: str) -> set[str]:
    """The modules a fresh interpreter holds after ``import module`` (no Django settings)."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return set(out.stdout.split())


@pytest.mark.parametrize(
    "module",
    [
        "redisq_django.pipeline.datasource",
        "redisq_django.pipeline.streaming",
        "redisq_django.pipeline.reading",
        "redisq_django.pipeline.writer",
    ],
)
def test_a_worker_side_module_imports_nothing_heavy(module: str) -> None:
    # When a Spark worker imports what it unpickles
    modules = imported_by(module)

    # Then it gets the data source, and none of the heavy modules
    assert module in modules
    heavy = sorted(m for m in modules if m.startswith(HEAVY))
    assert heavy == []
