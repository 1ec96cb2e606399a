"""Schedules in Django: ``periodic`` declarations, their ``Schedule`` rows synchronised
both ways, the admin (forms, actions, history), the worker's job, and an admin edit
reaching a running worker within seconds."""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

import pytest
import redis
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import User
from django.db import connections
from django.test import Client
from django.urls import reverse

from redisq_django.connection import get_broker
from redisq_django.core import Broker
from redisq_django.core.worker import WorkerOptions
from redisq_django.models import Schedule
from redisq_django.runner import build_worker
from redisq_django.schedules import ScheduleError, periodic
from redisq_django.schedules.declared import registry
from redisq_django.schedules.job import RowLoader
from redisq_django.schedules.schedule_sync import sync_schedules
from redisq_django.schedules.spec import QueueTarget, TaskTarget
from tests.support.admin_pages import staff
from tests.support.ticks import published_ids
from tests.support.workers import wait_for

pytestmark = pytest.mark.django_db


class FakeTask:
    """Stands for a ``django.tasks`` Task: a dotted path and an ``enqueue``."""

    module_path = "shop.tasks.refresh_rates"

    def enqueue(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("not called by a declaration")


# -- declarations ------------------------------------------------------------------------


def test_periodic_declares_queue_and_task_schedules(queue_name: str, declarations: None) -> None:
    # When a queue schedule and a task schedule are declared
    periodic("nightly", cron="0 3 * * *", queue=queue_name, payload={"kind": "daily"})
    task = FakeTask()
    assert periodic(every=dt.timedelta(minutes=5), kwargs={"base": "EUR"})(task) is task
    # Then both are registered, the task's under its dotted path
    decls = {d.name: d for d in registry.declarations()}
    assert decls["nightly"].target == QueueTarget(queue_name, {"kind": "daily"})
    assert decls["nightly"].cron == "0 3 * * *" and decls["nightly"].timezone is None
    assert decls["shop.tasks.refresh_rates"].target == TaskTarget(
        "shop.tasks.refresh_rates", (), {"base": "EUR"}
    )
    assert decls["shop.tasks.refresh_rates"].every_ms == 300_000


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda q: periodic(cron="* * * * *", queue=q), "needs a schedule name"),
        (lambda q: periodic("x", cron="61 * * * *", queue=q), "Invalid cron expression"),
        (lambda q: periodic("x", every=30, cron="* * * * *", queue=q), "not both"),
        (lambda q: periodic("x", every=30, queue=q, timezone="Nowhere/City"), "Unknown time zone"),
        (lambda q: periodic("x", every=30, queue=q, missed="sometimes"), "missed= must be one of"),
        (lambda q: periodic("x y", every=30, queue=q), "Invalid schedule name"),
        (lambda q: periodic("x", every=30, queue=q, payload={1j}), "plain JSON"),
        (lambda q: periodic(every=30)(lambda: None), "put it above @task"),
    ],
)
def test_periodic_refuses_what_workers_could_not_run(
    queue_name: str, declarations: None, call: Any, needle: str
) -> None:
    with pytest.raises(ScheduleError, match=needle):
        call(queue_name)


def test_the_same_name_declared_twice_differently_is_an_error(
    queue_name: str, declarations: None
) -> None:
    periodic("twice", every=30, queue=queue_name)
    periodic("twice", every=30, queue=queue_name)  # the same again (a re-import) is fine
    with pytest.raises(ScheduleError, match="declared twice"):
        periodic("twice", every=60, queue=queue_name)


# -- rows, both ways ---------------------------------------------------------------------


def test_sync_writes_declarations_keeps_admin_edits_and_applies_code_changes(
    queue_name: str, declarations: None, settings: Any
) -> None:
    settings.TIME_ZONE = "Europe/Paris"
    # Given a declared schedule, written to its row
    periodic("report", cron="0 3 * * *", queue=queue_name, payload={"n": 1})
    (row,) = sync_schedules()
    assert (row.origin, row.declared, row.cron, row.timezone) == (
        "code",
        True,
        "0 3 * * *",
        "Europe/Paris",
    )
    assert row.to_spec().target == QueueTarget(queue_name, {"n": 1})
    assert row.next_run_at is not None
    # When staff change its timing in the admin, and a worker restarts (sync again)
    row.cron = "30 4 * * *"
    row.save()
    updated = row.updated_at
    (row,) = sync_schedules()
    # Then the admin's change stays (unchanged code writes nothing)
    assert row.cron == "30 4 * * *" and row.updated_at == updated
    # When the code's declaration changes (a deploy)
    registry.clear()
    periodic("report", cron="0 5 * * *", queue=queue_name, payload={"n": 2})
    (row,) = sync_schedules()
    # Then the code wins
    assert row.cron == "0 5 * * *" and row.payload == {"n": 2}
    # When the declaration disappears
    registry.clear()
    registry._discovered = True
    assert sync_schedules() == []
    row.refresh_from_db()
    # Then the row is kept, not declared, and not run
    assert row.declared is False and row.to_spec().enabled is False


def test_model_round_trip_and_since(queue_name: str) -> None:
    # Given a schedule made in the admin
    row = Schedule.objects.create(name=queue_name, every=dt.timedelta(seconds=30), queue=queue_name)
    spec = row.to_spec()
    assert spec.timing.every_ms == 30_000 and spec.target == QueueTarget(queue_name, None)
    # When it is written back from its spec, it says the same
    copy = Schedule(name=queue_name)
    copy.from_spec(spec)
    assert (copy.every, copy.queue, copy.cron) == (row.every, row.queue, "")
    # And its ticks start again from "now" when its timing changes or it is enabled again,
    # not when something else changes
    since = row.since
    row.payload = {"x": 1}
    row.save()
    assert row.since == since
    row.every = dt.timedelta(seconds=60)
    row.save()
    assert row.since > since
    since = row.since
    row.enabled = False
    row.save()
    assert row.since == since and row.next_run_at is None
    row.enabled = True
    row.save()
    assert row.since > since and row.next_run_at is not None


def test_an_invalid_row_is_left_out_and_reported_once(
    queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a valid row and one with a cron typed wrong in the shell
    Schedule.objects.create(
        name=f"{queue_name}.ok", every=dt.timedelta(seconds=5), queue=queue_name
    )
    Schedule.objects.bulk_create(
        [Schedule(name=f"{queue_name}.bad", cron="every day", queue=queue_name)]
    )
    loader = RowLoader()
    # When the workers read them twice
    first, second = loader(), loader()
    # Then only the valid one runs, and the invalid one is logged once
    assert [s.name for s in first] == [s.name for s in second] == [f"{queue_name}.ok"]
    reported = [r.getMessage() for r in caplog.records if "bad" in r.getMessage()]
    assert reported == [
        f"Schedule {queue_name}.bad is not run: "
        "Invalid cron expression 'every day': Wrong number of fields."
    ]


# -- the task target (the Tasks backend's enqueue_once) -----------------------------------


def test_task_schedules_call_enqueue_once_once_per_tick_with_the_tick_id(
    queue_name: str,
    monkeypatch: pytest.MonkeyPatch,
    redis_client: redis.Redis,
    redisq_settings: Any,
) -> None:
    """Our side of the contract with ``redisq_django.tasks.enqueue_once`` (built on the
    tasks branch): a stand-in module records the calls; three workers, 10 s."""
    import sys
    import types

    from redisq_django.schedules.scheduler import Scheduler
    from redisq_django.schedules.spec import ScheduleSpec, tick_id
    from redisq_django.schedules.targets import firer
    from redisq_django.schedules.timing import Timing

    calls: list[tuple[Any, tuple[Any, ...], dict[str, Any], str]] = []
    stand_in = types.ModuleType("redisq_django.tasks")
    stand_in.enqueue_once = lambda task, args, kwargs, *, message_id: calls.append(  # type: ignore[attr-defined]
        (task, args, kwargs, message_id)
    )
    monkeypatch.setitem(sys.modules, "redisq_django.tasks", stand_in)
    monkeypatch.setattr("redisq_django.schedules.targets.load_task", lambda path: FakeTask())
    t0 = 1_750_000_000_000
    spec = ScheduleSpec(
        queue_name,
        Timing.of(every=1),
        TaskTarget("shop.tasks.refresh_rates", (1,), {"b": 2}),
        since_ms=t0,
    )
    now = [t0]
    workers = [
        Scheduler(
            Broker(redis_client).schedule_ledger,
            lambda: [spec],
            firer(get_broker()),
            clock=lambda: now[0],
        )
        for _ in range(3)
    ]
    for step in range(1, 101):
        now[0] = t0 + step * 100
        for worker in workers:
            worker.evaluate()
    assert [c[3] for c in calls] == [tick_id(queue_name, t0 + s * 1000) for s in range(1, 11)]
    assert {(type(c[0]).__name__, c[1], tuple(c[2].items())) for c in calls} == {
        ("FakeTask", (1,), (("b", 2),))
    }


# -- the admin ---------------------------------------------------------------------------


def post_action(client: Client, action: str, *rows: Schedule) -> Any:
    url = reverse("admin:redisq_django_schedule_changelist")
    token = client.get(url).cookies["csrftoken"].value
    return client.post(
        url,
        {"action": action, "_selected_action": [r.pk for r in rows], "csrfmiddlewaretoken": token},
    )


def form_data(**values: Any) -> dict[str, Any]:
    data = {
        "name": "",
        "enabled": "on",
        "cron": "",
        "every": "",
        "timezone": "UTC",
        "queue": "",
        "task": "",
        "payload": "null",
        "missed": "latest",
        "catch_up": "00:01:00",
    }
    data.update(values)
    return data


def test_admin_adds_a_schedule_and_refuses_invalid_ones(queue_name: str) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff("ops", "add_schedule", "change_schedule", "view_schedule"))
    url = reverse("admin:redisq_django_schedule_add")
    token = client.get(url).cookies["csrftoken"].value
    # When staff submit a bad cron, both cron and interval, and a task that does not exist
    for bad, needle in [
        ({"cron": "61 * * * *", "queue": queue_name}, "Invalid cron expression"),
        ({"cron": "* * * * *", "every": "00:00:10", "queue": queue_name}, "not both"),
        ({"cron": "* * * * *", "timezone": "Mars/Base", "queue": queue_name}, "Unknown time zone"),
        ({"every": "00:00:10"}, "either a queue or a task"),
        # Looked up among the declared tasks, never imported (tests/tasks/test_declared_tasks.py)
        ({"every": "00:00:10", "task": "nowhere.tasks.nothing"}, "is not declared"),
        ({"every": "00:00:10", "task": "json.dumps"}, "is not declared"),
    ]:
        data = form_data(name=queue_name, csrfmiddlewaretoken=token, **bad)
        page = client.post(url, data)
        # Then the form comes back with the reason, and nothing is saved
        assert page.status_code == 200, bad
        assert needle in page.content.decode(), bad
    assert not Schedule.objects.filter(name=queue_name).exists()
    # When they submit a valid one
    data = form_data(
        name=queue_name,
        cron="*/5 * * * *",
        timezone="Europe/Paris",
        queue=queue_name,
        payload='{"kind": "digest"}',
        csrfmiddlewaretoken=token,
    )
    assert client.post(url, data).status_code == 302
    # Then it is a schedule made in the admin, with its next run
    row = Schedule.objects.get(name=queue_name)
    assert (row.origin, row.payload, row.timezone) == ("admin", {"kind": "digest"}, "Europe/Paris")
    assert row.next_run_at is not None and row.next_run_at.minute % 5 == 0
    page = client.get(reverse("admin:redisq_django_schedule_changelist"))
    assert "cron */5 * * * * (Europe/Paris)" in page.content.decode()


def test_admin_actions_enable_disable_reset_with_history_and_permissions(
    queue_name: str, declarations: None
) -> None:
    # Given a declared schedule whose timing staff changed, and a viewer-only user
    periodic(queue_name, every=10, queue=queue_name)
    (row,) = sync_schedules()
    row.every = dt.timedelta(seconds=20)
    row.save()
    viewer = Client(enforce_csrf_checks=True)
    viewer.force_login(staff("viewer", "view_schedule"))
    # When the viewer tries to disable it
    post_action(viewer, "disable", row)
    # Then nothing changes (the action needs the change permission)
    row.refresh_from_db()
    assert row.enabled is True
    # When an operator disables it, enables it and resets it to the code
    ops = Client(enforce_csrf_checks=True)
    ops.force_login(staff("ops", "view_schedule", "change_schedule"))
    assert post_action(ops, "disable", row).status_code == 302
    row.refresh_from_db()
    assert row.enabled is False
    post_action(ops, "enable", row)
    page = post_action(ops, "reset_to_code", row)
    # Then each change applied, was reported and is in the admin history
    row.refresh_from_db()
    assert row.enabled is True and row.every == dt.timedelta(seconds=10)
    assert page.status_code == 302
    messages = [str(m) for m in page.wsgi_request._messages]  # type: ignore[attr-defined]
    assert any("Reset 1 schedule" in m for m in messages)
    assert [
        e.change_message for e in LogEntry.objects.filter(action_flag=CHANGE).order_by("pk")
    ] == [
        "Disabled",
        "Enabled",
        "Reset to the code's declaration",
    ]
    # And a declared schedule's name and target are read-only in its form
    form = ops.get(reverse("admin:redisq_django_schedule_change", args=[row.pk])).content.decode()
    assert 'name="queue"' not in form and 'name="every"' in form


# -- in the worker -----------------------------------------------------------------------


def test_build_worker_syncs_schedules_and_runs_the_schedule_job(
    a_consumer: str, declarations: None, redisq_settings: Any, queue_name: str
) -> None:
    periodic(queue_name, every=1, queue=queue_name)
    worker = build_worker([a_consumer], options=WorkerOptions(stats_interval=0))
    assert [j.name for j in worker.periodic] == ["dead-letter sink", "schedules", "trend samples"]
    assert Schedule.objects.get(name=queue_name).origin == "code"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_admin_edit_reaches_a_running_worker_within_seconds(
    a_consumer: str, redisq_settings: Any, queue_name: str, redis_client: redis.Redis
) -> None:
    # Given a schedule made in the admin, every second, and a worker running
    row = Schedule.objects.create(name=queue_name, every=dt.timedelta(seconds=1), queue=queue_name)
    worker = build_worker([a_consumer], options=WorkerOptions(stats_interval=0))

    def run() -> None:
        try:
            worker.run()
        finally:  # this thread's own database connection
            conn = connections["default"]
            if conn.vendor == "sqlite" and conn.connection is not None:
                conn.connection.close()  # Django ignores close() on in-memory databases
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.create_superuser("admin", password="pw"))
    change = reverse("admin:redisq_django_schedule_change", args=[row.pk])

    def ticks() -> list[int]:
        return [int(i.split("@")[1]) for i in published_ids(redis_client, queue_name)]

    try:
        wait_for(lambda: len(ticks()) >= 3, timeout=15, what="3 ticks of every 1 s")
        # When staff change it to a cron of every 5 s in the admin
        token = client.get(change).cookies["csrftoken"].value
        data = form_data(
            name=queue_name, cron="*/5 * * * * *", queue=queue_name, csrfmiddlewaretoken=token
        )
        data.pop("name")  # read-only once created
        assert client.post(change, data).status_code == 302
        edited = int(time.time() * 1000)
        # Then the worker applies it within seconds: two ticks of the new cron come
        wait_for(
            lambda: len([t for t in ticks() if t > edited + 4000]) >= 2,
            timeout=20,
            what="two ticks of the new cron",
        )
        new = [t for t in ticks() if t > edited + 3000]  # reload (2 s) + an evaluation
        assert new and all(t % 5000 == 0 for t in new), new
        # When staff disable it
        row.refresh_from_db()
        post_action(client, "disable", row)
        disabled = int(time.time() * 1000)
        time.sleep(8)  # two ticks of the cron would fall in here
        # Then nothing fires 3 s after the change
        assert [t for t in ticks() if t > disabled + 3000] == []
        assert len(set(ticks())) == len(ticks())  # and nothing ever fired twice
    finally:
        worker.stop()
        thread.join(timeout=30)


def test_migrate_reports_a_schedule_it_cannot_write_instead_of_failing(
    queue_name: str, declarations: None, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from django.apps import apps

    from redisq_django.signal_handlers import sync_after_migrate

    # Given a schedule declared for a queue that REDISQ["QUEUES"] does not list
    settings.REDISQ = {**settings.REDISQ, "QUEUES": ["orders"]}
    periodic(queue_name, every=10, queue=queue_name)
    # When migrate finishes (its post_migrate receiver syncs the rows)
    sync_after_migrate(sender=apps.get_app_config("redisq_django"))
    # Then it says why, and writes no row
    assert any(
        "Schedules not synchronised" in r.getMessage() and queue_name in r.getMessage()
        for r in caplog.records
    )
    assert not Schedule.objects.filter(name=queue_name).exists()
