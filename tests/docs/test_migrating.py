"""The migration guide's "after" code (docs/howto/migrating.md, blocks marked
``readme-test: migrating-after``) runs against the real API: its consumers, tasks and
schedules are declared with the options it shows, its publishes and enqueues reach
Redis, and its ``runconsumer`` command lines parse."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any
from unittest import mock

import django
import pytest

from tests.support.readme import DOCS, Block, blocks

PAGE = DOCS / "howto" / "migrating.md"
MARK = "migrating-after"


def _after(lang: str) -> list[Block]:
    text = PAGE.read_text(encoding="utf-8")
    return [b for b in blocks(text) if b.mark == MARK and b.lang == lang]


@pytest.fixture
def declarations_restored() -> Iterator[None]:
    """The consumer, schedule and task declarations of the process as they were."""
    from redisq_django.consuming.declarations import registry as consumers
    from redisq_django.schedules.declared import registry as schedules

    consumers.autodiscover()  # the apps' own first, as a process has them
    schedules.autodiscover()
    saved = dict(consumers._declarations), dict(schedules._declarations)
    yield
    consumers._declarations.clear()
    consumers._declarations.update(saved[0])
    schedules._declarations.clear()
    schedules._declarations.update(saved[1])


def test_the_guide_shows_an_after_for_each_before() -> None:
    assert len(_after("python")) == 3  # Celery, django-rq, Dramatiq
    assert len(_after("sh")) == 3


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks needs Django 6.0")
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("empty_redis", "declarations_restored")
def test_the_after_code_declares_and_publishes_as_shown(redisq_settings: Any) -> None:
    from redisq_django.connection import get_broker
    from redisq_django.consuming.declarations import registry as consumers
    from redisq_django.schedules.declared import registry as schedules

    # Given the TASKS backend the guide points to, and stand-ins for the reader's code
    redisq_settings.TASKS = {
        "default": {"BACKEND": "redisq_django.tasks.RedisqBackend", "QUEUES": ["default"]}
    }
    yours = {
        "order": SimpleNamespace(pk=42),
        "event": SimpleNamespace(pk=7),
        **{name: mock.Mock() for name in ("payments", "mailer", "partner", "reports")},
    }

    # When each "after" block runs as a module of its own
    for number, block in enumerate(_after("python")):
        module = f"migrating_after_{number}"
        code = compile(block.code, f"{PAGE}:{block.line}", "exec")
        exec(code, {"__name__": module, **yours})  # our own docs, not input

    # Then the consumers carry the options the page gives them
    declared = {d.key: d for d in consumers.declarations()}
    receipts = declared[("emails", "receipts")]
    assert (receipts.max_retries, receipts.backoff, receipts.max_backoff) == (3, 10, 60)
    deliver = declared[("webhooks", "deliver")]
    assert (deliver.max_retries, deliver.backoff, deliver.max_backoff) == (10, 1, 300)
    assert deliver.time_limit == 30
    assert declared[("webhooks", "audit")].atomic == "default"
    # And beat's entry is a schedule of the task, on the same cron
    (nightly,) = [d for d in schedules.declarations() if d.name.endswith("nightly_report")]
    assert nightly.cron == "0 3 * * *"
    # And what was published and enqueued waits in Redis: 2 emails, 2 webhooks (one now,
    # one delayed each), 2 tasks (one now, one in a minute)
    broker = get_broker()
    stats = {q: broker.stats(q) for q in ("emails", "webhooks", "tasks.default")}
    assert all(s.length + s.delayed == 2 for s in stats.values()), stats


def test_the_after_command_lines_parse() -> None:
    from django.core.management import load_command_class

    parser = load_command_class("redisq_django", "runconsumer").create_parser(
        "manage.py", "runconsumer"
    )
    for block in _after("sh"):
        for line in block.code.splitlines():
            words = shlex.split(line, comments=True)
            if not words:
                continue
            assert words[:3] == ["python", "manage.py", "runconsumer"], line
            parser.parse_args(words[3:])  # exits (SystemExit) on an unknown option
