"""@consumer declarations, their database mirror, runconsumer's wiring and the operator
command (in-process; the real-process fault tests are in tests/faults/test_faults.py)."""

from __future__ import annotations

import io
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from redisq_django import Message, Reject, consumer
from redisq_django.conf import get_core_config
from redisq_django.connection import get_broker
from redisq_django.consuming.consumer_sync import sync_declarations
from redisq_django.consuming.declarations import ConsumerDeclaration, registry
from redisq_django.core.errors import ConfigurationError
from redisq_django.core.worker import WorkerOptions
from redisq_django.deadletters.sinking import sink_all
from redisq_django.models import (
    SOURCE_CODE,
    SOURCE_DEFAULT,
    SOURCE_OVERRIDE,
    Consumer,
    DeadLetter,
    Queue,
)
from redisq_django.runner import SelectionError, build_worker, select

pytestmark = pytest.mark.django_db

received: list[tuple[str, Any, int]] = []


@pytest.fixture
def declared(queue_name: str) -> Iterator[None]:
    """Declarations of queue ``queue_name`` only (other tests' declarations set aside)."""
    saved = dict(registry._declarations)
    registry._declarations.clear()
    received.clear()

    @consumer(queue_name, name="billing", max_retries=2, backoff=0.01, max_backoff=0.02)
    def billing(message: Message) -> None:
        if message.payload.get("poison"):
            raise ValueError("cannot bill")
        if message.payload.get("bad"):
            raise Reject("no such order")
        received.append(("billing", message.payload, message.attempts))

    @consumer(queue_name, concurrency=2)
    def email(message: Message) -> None:
        received.append(("email", message.payload, message.attempts))

    try:
        yield
    finally:
        registry._declarations.clear()
        registry._declarations.update(saved)


def test_decorator_declares_with_defaults_and_name_from_function(
    queue_name: str, declared: None
) -> None:
    decls = {d.name: d for d in registry.declarations() if d.queue == queue_name}
    assert set(decls) == {"billing", "email"}
    assert decls["email"].concurrency == 2
    assert decls["email"].max_retries is None  # the REDISQ default applies
    assert decls["billing"].handler_path.endswith("test_consumers.billing") or decls[
        "billing"
    ].handler_path.endswith("billing")


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"max_retries": -1}, "max_retries"),
        ({"concurrency": 0}, "concurrency"),
        ({"visibility_timeout": 0}, "visibility_timeout"),
        ({"backoff": "1"}, "backoff"),
        ({"ordered": True, "wait_replicas": -1}, "wait_replicas must be an integer >= 0"),
        ({"ordered": True, "wait_replicas": 1.5}, "wait_replicas must be an integer >= 0"),
        ({"wait_replicas": 1}, "wait_replicas=1 needs ordered=True"),
    ],
)
def test_decorator_refuses_bad_values(queue_name: str, kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigurationError, match=needle):
        consumer(queue_name, **kwargs)


def test_decorator_refuses_bad_names_and_start_points(queue_name: str) -> None:
    with pytest.raises(ValueError, match="queue name"):
        consumer("sh op")
    with pytest.raises(ValueError, match="start point"):
        consumer(queue_name, start="yesterday")


def test_same_consumer_declared_twice_is_an_error(queue_name: str, declared: None) -> None:
    def billing(message: Message) -> None: ...

    billing.__module__ = "elsewhere"
    with pytest.raises(ConfigurationError, match="declared twice"):
        consumer(queue_name, name="billing")(billing)


def test_sync_mirrors_code_and_keeps_admin_overrides(queue_name: str, declared: None) -> None:
    # Given the declarations synchronised once and staff overriding max retries
    sync_declarations()
    row = Consumer.objects.get(queue__name=queue_name, name="billing")
    assert row.declared_max_retries == 2 and row.max_retries is None
    row.max_retries = 7
    row.paused = True
    row.save()

    # When code changes the declaration and the rows are synchronised again
    registry._declarations[(queue_name, "billing")] = ConsumerDeclaration(
        **{**registry._declarations[(queue_name, "billing")].__dict__, "max_retries": 4}
    )
    sync_declarations()

    # Then code values are updated and the override and pause are kept
    row.refresh_from_db()
    assert row.declared_max_retries == 4
    assert row.max_retries == 7 and row.paused
    config = get_core_config()
    assert row.effective("max_retries", config).source == SOURCE_OVERRIDE
    assert row.effective("max_retries", config).value == 7
    assert row.effective("backoff", config).source == SOURCE_CODE
    assert row.effective("visibility_timeout", config).source == SOURCE_DEFAULT


def test_a_second_sync_with_unchanged_code_writes_nothing(queue_name: str, declared: None) -> None:
    # Given rows already in line with the code (a restart, or another worker started too)
    sync_declarations()
    # When synchronising again
    with CaptureQueriesContext(connection) as queries:
        rows = sync_declarations()
    # Then it only read: no write, so no write lock for workers starting together
    writes = [q["sql"] for q in queries if not q["sql"].lstrip().upper().startswith("SELECT")]
    assert writes == []
    assert {(r.queue.name, r.name) for r in rows} >= {(queue_name, "billing")}


def test_consumers_no_longer_declared_are_marked_and_not_run(
    queue_name: str, declared: None
) -> None:
    sync_declarations()
    del registry._declarations[(queue_name, "email")]
    sync_declarations()
    assert not Consumer.objects.get(queue__name=queue_name, name="email").declared
    assert Consumer.objects.get(queue__name=queue_name, name="billing").declared


def test_selection_errors_name_what_exists(queue_name: str, declared: None) -> None:
    with pytest.raises(
        SelectionError, match=rf"No consumer is declared for queue 'nope'.*{re.escape(queue_name)}"
    ):
        select(["nope"])
    with pytest.raises(SelectionError, match=r"No consumer named 'x'.*billing, email"):
        select([queue_name], ["x"])
    assert [d.name for d in select([queue_name], ["email"])] == ["email"]


# sink_all() sinks every queue in Redis: no other test's dead letters, please.
@pytest.mark.usefixtures("empty_redis")
def test_worker_runs_declared_consumers_to_completion(
    queue_name: str, declared: None, redisq_settings: Any
) -> None:
    # Given both consumers registered and messages published, one poison, one rejected
    broker = get_broker()
    for name in ("billing", "email"):
        broker.consumers.ensure(queue_name, name)
    ids = broker.publish_many(queue_name, [{"order": n} for n in range(30)])
    broker.publish(queue_name, {"poison": True})
    broker.publish(queue_name, {"bad": True})

    # When a burst worker runs them
    worker = build_worker([queue_name], options=WorkerOptions(burst=True, stats_interval=0))
    assert worker.run() == 0

    # Then every order reached both consumers once, and the failures are dead letters
    billing = [p["order"] for c, p, _ in received if c == "billing"]
    email = [p for c, p, _ in received if c == "email"]
    assert sorted(billing) == list(range(30))
    assert len(email) == 32 and len(ids) == 30
    # (the worker's sink may already have moved them from Redis into the database)
    sink_all()
    dead = {d.reason: d for d in DeadLetter.objects.filter(queue=queue_name, consumer="billing")}
    assert set(dead) == {"failed", "rejected"}
    assert dead["failed"].attempts == 3  # max_retries=2 -> 3 deliveries
    assert dead["rejected"].error_message == "no such order"
    assert broker.dead_letters.read(queue_name, "billing") == []


def test_worker_picks_up_a_pause_from_the_database(
    queue_name: str, declared: None, redisq_settings: Any
) -> None:
    worker = build_worker([queue_name], options=WorkerOptions(stats_interval=0))
    assert not worker.specs[(queue_name, "billing")].paused
    Consumer.objects.filter(name="billing").update(paused=True)
    worker._refresh()
    assert worker.specs[(queue_name, "billing")].paused
    Queue.objects.filter(name=queue_name).update(paused=True)
    worker._refresh()
    assert worker.specs[(queue_name, "email")].paused


def test_wait_replicas_reaches_the_worker_of_an_ordered_consumer(
    queue_name: str, declared: None, redisq_settings: Any
) -> None:
    # Given an ordered consumer declared with wait_replicas=1, and settings whose
    # default for the others is 2 replicas waited for at most 0.25 s
    redisq_settings.REDISQ = {
        **redisq_settings.REDISQ,
        "ORDERED_WAIT_REPLICAS": 2,
        "ORDERED_WAIT_TIMEOUT": 0.25,
    }

    @consumer(queue_name, name="ledger", ordered=True, wait_replicas=1)
    def ledger(message: Message) -> None:
        pass

    @consumer(queue_name, name="journal", ordered=True)
    def journal(message: Message) -> None:
        pass

    # When the worker is built
    worker = build_worker([queue_name])
    specs = worker.specs
    # Then its specs carry the declaration (None: the setting applies)...
    assert specs[(queue_name, "ledger")].wait_replicas == 1
    assert specs[(queue_name, "journal")].wait_replicas is None
    assert specs[(queue_name, "billing")].wait_replicas is None

    # ...and each instance waits as its consumer says, unordered ones never
    def wait_of(name: str) -> tuple[int, int] | None:
        spec = specs[(queue_name, name)]
        sub = worker.broker.subscribe(
            queue_name, name, ordered=spec.ordered, wait_replicas=spec.wait_replicas
        )
        wait = sub.replica_wait
        return None if wait is None else (wait.replicas, wait.timeout_ms)

    assert {n: wait_of(n) for n in ("ledger", "journal", "billing")} == {
        "ledger": (1, 250),
        "journal": (2, 250),
        "billing": None,
    }


def test_concurrency_flag_wins(queue_name: str, declared: None, redisq_settings: Any) -> None:
    worker = build_worker([queue_name], concurrency=5)
    assert {s.concurrency for s in worker.specs.values()} == {5}


def test_broken_consumers_module_is_reported(
    queue_name: str, redisq_settings: Any, tmp_path: Path
) -> None:
    settings = redisq_settings
    # Given an installed app whose consumers.py raises on import
    app = tmp_path / "brokenapp"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "consumers.py").write_text(textwrap.dedent("import does_not_exist\n"))
    sys.path.insert(0, str(tmp_path))
    registry._discovered = False
    try:
        settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, "brokenapp"]
        # Then the system check names the module and the error
        errors = [e for e in run_checks() if e.id == "redisq_django.E002"]
        assert len(errors) == 1
        assert "brokenapp.consumers" in errors[0].msg and "does_not_exist" in errors[0].msg
        # And runconsumer says it in one line
        with pytest.raises(CommandError, match=r"Could not import brokenapp\.consumers"):
            call_command("runconsumer", queue_name, "--burst")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("brokenapp", None)
        sys.modules.pop("brokenapp.consumers", None)
        registry._discovered = False


def test_operator_command(
    queue_name: str, declared: None, redisq_settings: Any, monkeypatch: Any
) -> None:
    broker = get_broker()
    broker.consumers.ensure(queue_name, "billing")
    broker.publish(queue_name, {"poison": True})
    build_worker(
        [queue_name], ["billing"], options=WorkerOptions(burst=True, stats_interval=0)
    ).run()

    out = io.StringIO()
    call_command("redisq", "status", stdout=out)
    assert queue_name in out.getvalue() and "billing" in out.getvalue()

    # dead letters move from Redis into rows when listed
    out = io.StringIO()
    call_command("redisq", "dead", "list", "--queue", queue_name, stdout=out)
    (row,) = DeadLetter.objects.filter(queue=queue_name, consumer="billing")
    assert broker.dead_letters.read(queue_name, "billing") == []
    assert str(row.pk) in out.getvalue() and "ValueError" in out.getvalue()

    out = io.StringIO()
    call_command("redisq", "dead", "retry", str(row.pk), stdout=out)
    assert "Re-drove 1 dead letter" in out.getvalue()
    row.refresh_from_db()
    assert row.status == DeadLetter.Status.RETRIED and row.retry_count == 1 and row.retried_at
    assert broker.stats(queue_name).consumers[0].direct == 1

    call_command(
        "redisq", "replay", queue_name, "billing", "--from", "earliest", stdout=io.StringIO()
    )
    assert broker.stats(queue_name).consumers[0].lag == 1

    monkeypatch.setattr("builtins.input", lambda prompt: "no")
    with pytest.raises(CommandError, match="Not confirmed"):
        call_command("redisq", "purge", queue_name)
    assert broker.stats(queue_name).length == 1
    monkeypatch.setattr("builtins.input", lambda prompt: queue_name)
    call_command("redisq", "purge", queue_name, stdout=io.StringIO())
    assert broker.stats(queue_name).length == 0

    with pytest.raises(CommandError, match="Name the dead letters"):
        call_command("redisq", "dead", "retry")


def test_consumer_for_a_queue_not_in_queues_is_reported(
    queue_name: str, declared: None, settings: Any
) -> None:
    settings.REDISQ = {"QUEUES": ["orders"]}
    errors = [e for e in run_checks() if e.id == "redisq_django.E003"]
    assert {e.msg.split("'")[1] for e in errors} == {"billing", "email"}
    assert all(f"'{queue_name}'" in e.msg and e.hint for e in errors)
    settings.REDISQ = {"QUEUES": ["orders", queue_name]}
    assert [e for e in run_checks() if e.id == "redisq_django.E003"] == []


def test_publishing_to_a_queue_not_in_queues_is_refused(
    queue_name: str, settings: Any, redis_url: str
) -> None:
    import redisq_django
    from redisq_django.conf import SettingsError

    settings.REDISQ = {"URL": redis_url, "QUEUES": [queue_name]}
    typo = f"{queue_name}-typo"
    with pytest.raises(
        SettingsError, match=rf"'{re.escape(typo)}' is not in settings\.REDISQ\['QUEUES'\]"
    ):
        redisq_django.publish(typo, {})
    assert redisq_django.publish(queue_name, {})


def test_deploy_check_reports_unreachable_redis(settings: Any, redis_url: str) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.REDISQ = {"URL": f"redis://127.0.0.1:{port}/0"}
    errors = [e for e in run_checks(include_deployment_checks=True) if e.id == "redisq_django.E004"]
    assert len(errors) == 1 and f"127.0.0.1:{port}" in errors[0].msg
    assert [e for e in run_checks() if e.id == "redisq_django.E004"] == []  # deploy only
    settings.REDISQ = {"URL": redis_url}
    assert [
        e for e in run_checks(include_deployment_checks=True) if e.id == "redisq_django.E004"
    ] == []


def test_runconsumer_batch_ack_acknowledges_per_batch_and_children_get_it(
    queue_name: str, declared: None, redisq_settings: Any
) -> None:
    from redisq_django.management.commands.runconsumer import Command

    broker = get_broker()
    for name in ("billing", "email"):
        broker.consumers.ensure(queue_name, name)
    broker.publish_many(queue_name, [{"n": i} for i in range(40)])
    out = io.StringIO()
    call_command(
        "runconsumer", queue_name, "--burst", "--batch-ack", "--stats-interval", "0", stdout=out
    )
    assert "acks per batch" in out.getvalue()
    assert sorted(p["n"] for who, p, _ in received if who == "billing") == list(range(40))
    log = broker.keys(queue_name).log
    assert broker.client.xpending(log, "billing")["pending"] == 0
    # A supervisor's children are started with the same choice
    opts = {
        "queues": [queue_name],
        "consumer": [],
        "burst": False,
        "batch_ack": True,
        **{dest: None for dest, _ in Command.CHILD_OPTIONS},
    }
    assert "--batch-ack" in Command()._child_argv(opts)


def test_runconsumer_fixed_threads_keeps_every_thread_and_children_get_it(
    queue_name: str, declared: None, redisq_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from redisq_django.core import worker as worker_module
    from redisq_django.management.commands.runconsumer import Command

    # Given the command run with --fixed-threads (the worker it builds is kept)
    built: list[Any] = []
    real_run = worker_module.Worker.run

    def run(self: Any) -> int:
        built.append(self)
        return real_run(self)

    monkeypatch.setattr(worker_module.Worker, "run", run)
    out = io.StringIO()
    call_command(
        "runconsumer", queue_name, "--burst", "--fixed-threads", "--stats-interval", "0", stdout=out
    )
    # Then its banner says so and its worker keeps every thread fetching
    assert "fixed threads" in out.getvalue()
    assert [w.crews.elastic for w in built] == [False]
    # And a supervisor's children are started with the same choice
    opts = {
        "queues": [queue_name],
        "consumer": [],
        "burst": False,
        "batch_ack": False,
        "fixed_threads": True,
        **{dest: None for dest, _ in Command.CHILD_OPTIONS},
    }
    assert "--fixed-threads" in Command()._child_argv(opts)
