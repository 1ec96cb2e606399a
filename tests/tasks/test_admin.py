"""The task results admin through the test client: permissions, and Redis down."""

from __future__ import annotations

import socket
from typing import Any

import pytest

pytest.importorskip("django.tasks", reason="the tasks backend needs Django >= 6.0 (django.tasks)")

from django.contrib.auth.models import User

from tests.tasks.conftest import TasksEnv

pytestmark = pytest.mark.django_db(transaction=True)
URL = "/admin/redisq_django/taskresults/"


def test_results_need_the_view_permission(tasks_env: TasksEnv, client: Any) -> None:
    User.objects.create_user("clerk", password="pw-clerk-123", is_staff=True)
    client.login(username="clerk", password="pw-clerk-123")
    assert client.get(URL).status_code == 403


def test_the_page_says_redis_is_unreachable_instead_of_failing(
    tasks_env: TasksEnv, admin_client: Any, settings: Any
) -> None:
    # Given a Redis that is not there (a port nothing listens on)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.REDISQ = {"URL": f"redis://127.0.0.1:{port}/0"}
    # Then the list and a result's page say so in a banner, never a 500
    page = admin_client.get(URL)
    assert page.status_code == 200
    assert b'id="redisq-unreachable"' in page.content
    result = admin_client.get(f"{URL}result/abc/")
    assert result.status_code == 200 and b'id="redisq-banner"' in result.content


def test_a_result_page_shows_arguments_and_return_value(
    tasks_env: TasksEnv, admin_client: Any
) -> None:
    result = tasks_env.task("calculate").enqueue(20, 22)
    tasks_env.run_worker()
    listing = admin_client.get(URL, {"status": "SUCCESSFUL"})
    assert result.id.encode() in listing.content
    assert result.id.encode() not in admin_client.get(URL, {"status": "FAILED"}).content
    page = admin_client.get(f"{URL}result/{result.id}/")
    assert page.status_code == 200
    assert b"[20, 22]" in page.content and b"&quot;sum&quot;: 42" in page.content
