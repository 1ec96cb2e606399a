"""The task results page as a console page, with the test client on a real Redis:
status badges, filters by status, task and queue, pages of 50 read from a bounded
window, Retry of a FAILED result (POST, CSRF, change permission) through the Tasks
backend, and a hung Redis (SIGSTOP) answered with a banner after one short timeout."""

from __future__ import annotations

import os
import re
import signal
import time
from typing import Any

import pytest

pytest.importorskip("django.tasks", reason="the tasks backend needs Django >= 6.0 (django.tasks)")

from django.contrib.auth.models import Permission, User
from django.tasks import TaskResultStatus, default_task_backend
from django.test import Client

from redisq_django import deadletters
from redisq_django.admin import live
from redisq_django.admin.task_result_reads import WINDOW
from redisq_django.models import DeadLetter
from tests.support.redis_server import RedisServer
from tests.tasks.conftest import TasksEnv

# The results page lists the results of every queue on the server: start from an empty
# one (another file's tasks, e.g. tests/docs/test_migrating.py's, stay on it).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("empty_redis")]
URL = "/admin/redisq_django/taskresults/"
FAILING = "tests.tasks.sample_tasks.failing"


def ids(page: Any) -> list[str]:
    return [r["id"] for r in page.context["rows"]]


def user(name: str, *codenames: str) -> Client:
    staff = User.objects.create_user(name, password="pw", is_staff=True)
    for codename in codenames:
        staff.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff)
    return client


def test_results_are_filtered_and_paged(tasks_env: TasksEnv, admin_client: Any) -> None:
    # Given 60 successful tasks and 3 failed ones, run by a real worker
    done = [tasks_env.task("calculate").enqueue(i, 1) for i in range(60)]
    failed = [tasks_env.task("failing").enqueue(f"no {i}") for i in range(3)]
    tasks_env.run_worker()

    # Then the list shows 50 per page, the most recently changed first, with badges
    first = admin_client.get(URL)
    assert len(first.context["rows"]) == 50 and first.context["found"].matching == 63
    assert b'class="redisq-badge redisq-status redisq-active">SUCCESSFUL' in first.content
    second = admin_client.get(URL, {"p": "2"})
    assert len(second.context["rows"]) == 13
    assert set(ids(first)) | set(ids(second)) == {r.id for r in [*done, *failed]}

    # And filters by status, task and queue
    assert set(ids(admin_client.get(URL, {"status": "FAILED"}))) == {r.id for r in failed}
    by_task = admin_client.get(URL, {"task": FAILING})
    assert set(ids(by_task)) == {r.id for r in failed}
    assert b'class="redisq-badge redisq-status redisq-dead">FAILED' in by_task.content
    queue = f"tasks.{tasks_env.queue}"
    assert admin_client.get(URL, {"queue": queue}).context["found"].matching == 63
    assert admin_client.get(URL, {"queue": "tasks.default"}).context["rows"] == []
    assert admin_client.get(URL, {"status": "FAILED", "p": "2"}).context["rows"] == []


def test_a_list_reads_a_bounded_window_of_results(tasks_env: TasksEnv, admin_client: Any) -> None:
    # Given more results than the window (READY: enqueued, never run)
    noop = tasks_env.task("noop")
    for i in range(WINDOW + 20):
        noop.enqueue(i)
    # Then a page reads the latest WINDOW and shows 50 of them, saying how many exist
    page = admin_client.get(URL)
    found = page.context["found"]
    assert (found.total, found.looked_at, len(found.rows)) == (WINDOW + 20, WINDOW, 50)
    assert (
        f"{WINDOW + 20} kept; filters and pages cover the latest {WINDOW}".encode() in page.content
    )


def test_retry_enqueues_a_failed_task_again_through_its_backend(tasks_env: TasksEnv) -> None:
    # Given a FAILED task whose dead letter the sink stored
    result = tasks_env.task("failing").enqueue("card declined")
    tasks_env.run_worker()
    deadletters.sink(f"tasks.{tasks_env.queue}", "tasks")
    retry = f"{URL}result/{result.id}/retry/"

    # Then viewers may not retry, nor may anyone with a GET or without the CSRF token
    viewer = user("viewer", "view_taskresults")
    assert viewer.post(retry, {"csrfmiddlewaretoken": csrf(viewer)}).status_code == 403
    ops = user("ops", "view_taskresults", "change_taskresults")
    assert ops.get(retry).status_code == 405
    assert ops.post(retry).status_code == 403  # no CSRF token

    # When someone with the change permission presses Retry
    answer = ops.post(retry, {"csrfmiddlewaretoken": csrf(ops)}, follow=True)

    # Then the task is enqueued again with its arguments, a new result, and says so
    (message,) = [str(m) for m in answer.context["messages"]]
    new_id = message.split("new result ")[1].split(".")[0]
    assert message.startswith(f"Task {FAILING} enqueued again: new result {new_id}.")
    assert "its dead letter is discarded" in message
    again = default_task_backend.get_result(new_id)
    assert (again.status, again.args, again.task.module_path) == (
        TaskResultStatus.READY,
        ["card declined"],
        FAILING,
    )
    assert DeadLetter.objects.get(message_id=result.id).status == DeadLetter.Status.DISCARDED
    # And a result that is not FAILED is not retried
    answer = ops.post(
        f"{URL}result/{new_id}/retry/", {"csrfmiddlewaretoken": csrf(ops)}, follow=True
    )
    assert "is READY, not FAILED: not retried" in str(next(iter(answer.context["messages"])))


def csrf(client: Client) -> str:
    """A CSRF token for ``client`` (from the list page's cookie)."""
    client.get(URL)
    return str(client.cookies["csrftoken"].value)


def test_a_hung_redis_is_answered_with_a_banner_after_one_timeout(
    tasks_env: TasksEnv, admin_client: Any, settings: Any, volatile_redis_server: RedisServer
) -> None:
    # Given the site's Redis hung (SIGSTOP: the kernel still accepts, nothing answers)
    settings.REDISQ = {"URL": volatile_redis_server.url}
    live.clear()
    watcher = volatile_redis_server.client()
    before = watcher.info("stats")["total_connections_received"]
    os.kill(volatile_redis_server.pid, signal.SIGSTOP)
    try:
        # When staff open the task results, then it answers in time with a banner
        started = time.monotonic()
        page = admin_client.get(URL)
        assert time.monotonic() - started < 2.0
        assert page.status_code == 200
        assert b'id="redisq-banner"' in page.content and b"is unreachable" in page.content
        # ... and a result's page says so at once, without trying again
        assert b"is unreachable" in admin_client.get(f"{URL}result/abc/").content
    finally:
        os.kill(volatile_redis_server.pid, signal.SIGCONT)
    # Then the two pages cost one connection, which timed out once (Redis, running
    # again, accepts what waited in its backlog: counted now)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        received = watcher.info("stats")["total_connections_received"] - before
        if received >= 1:
            break
        time.sleep(0.05)
    time.sleep(0.2)  # a second connection, if one was made, is accepted by now too
    assert watcher.info("stats")["total_connections_received"] - before == 1
    watcher.close()


def test_times_read_24_hour_as_on_the_charts(tasks_env: TasksEnv, admin_client: Any) -> None:
    # Given a task run today
    result = tasks_env.task("calculate").enqueue(2, 3)
    tasks_env.run_worker()

    # When staff open the results and that result's page
    listing = admin_client.get(URL).content.decode()
    page = admin_client.get(f"{URL}result/{result.id}/").content.decode()

    # Then its times are today's, HH:MM:SS as the charts read them, the date in the title
    clocks = r'<time class="redisq-clock" datetime="[^"]+" title="(\S+) [^"]+">([^<]*)</time>'
    today = time.strftime("%Y-%m-%d", time.gmtime())  # tests run in UTC
    found = re.findall(clocks, listing) + re.findall(clocks, page)
    assert len(found) == 4, found  # enqueued in the list; enqueued, started, finished
    assert {day for day, _ in found} == {today}
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d", shown) for _, shown in found), found
    assert "a.m." not in listing + page and "p.m." not in listing + page
