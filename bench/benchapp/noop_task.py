"""The no-op Django task of ``bench/drain_budget.py`` (the Tasks backend's path). Not named
``tasks.py``: runconsumer imports every app's ``tasks`` module, and the other benches
configure no Tasks backend with its queue."""

from __future__ import annotations

from django.tasks import task

from benchapp.consumers import _note_drained


@task(queue_name="bench_tasks")
def noop() -> None:
    """Does nothing but note when it ran (as ``bench/noop`` does)."""
    _note_drained()
