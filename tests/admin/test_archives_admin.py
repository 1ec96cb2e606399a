"""Named archives from the shell and the admin: ``manage.py redisq archives [remove]`` and
the queue page's archives with a Remove action (delete permission, POST, CSRF, history),
both through ``redisq_django.archives`` (C14: only an explicit removal lets retention
stop waiting for an archive)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from redisq_django.models import Queue
from tests.support.admin_pages import changes, redisq, staff

pytestmark = [pytest.mark.django_db, pytest.mark.site_broker(REPLAY_WINDOW=0)]


@pytest.fixture
def archived(broker: Any, queue_name: str) -> list[str]:
    """Ten messages every consumer acked; archive "nightly" stored 4, "adhoc" all."""
    broker.consumers.ensure(queue_name, "billing")
    ids = broker.publish_many(queue_name, [{"n": n} for n in range(10)])
    with broker.subscribe(queue_name, "billing") as sub:
        sub.ack(sub.fetch(count=20, block_ms=200))
    broker.archives.register(queue_name, "nightly", "messages", ids[3])
    broker.archives.register(queue_name, "adhoc", "messages", ids[-1])
    return ids


def test_the_command_lists_archives_and_removes_one_when_confirmed(
    broker: Any, archived: list[str], queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    Queue.objects.create(name=queue_name)
    User.objects.create_superuser("ops", password="pw")
    # The list: each archive with its position and lag
    listed = redisq("archives", "list", "--queue", queue_name)
    lines = {line.split()[1]: line.split() for line in listed.splitlines()[1:3]}
    assert lines["nightly"][2:5] == ["messages", archived[3], "6"]
    assert lines["adhoc"][2:5] == ["messages", archived[-1], "0"]
    assert redisq("archives", "--queue", queue_name) == listed  # list is the default
    # Retention keeps what "nightly" has not stored
    assert broker.trim(queue_name) == (4, 0)
    # When the operator types another name: nothing is removed
    monkeypatch.setattr("builtins.input", lambda prompt: "adhoc")
    with pytest.raises(CommandError, match="Not confirmed; nothing was removed"):
        redisq("archives", "remove", "nightly")
    # When they confirm: it is removed from every queue, and the history says who did it
    monkeypatch.setattr("builtins.input", lambda prompt: "nightly")
    out = redisq("archives", "remove", "nightly", "--user", "ops")
    assert out.strip() == f"Removed archive 'nightly' from {queue_name}."
    assert [s.name for s in broker.archives.states(queue_name)] == ["adhoc"]
    assert changes() == [
        ("ops", queue_name, "Removed archive nightly: retention no longer waits for it")
    ]
    # And retention no longer waits for it
    assert broker.trim(queue_name) == (6, 0)
    # And removing one that is not there is an error
    with pytest.raises(CommandError, match="Archive 'nightly' is not registered on queue"):
        redisq("archives", "remove", "nightly", "--queue", queue_name, "--yes")


def test_the_queue_page_shows_its_archives_and_removes_one_after_confirmation(
    broker: Any, archived: list[str], queue_name: str
) -> None:
    row = Queue.objects.create(name=queue_name)
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff("ops", "view_queue", "delete_queue"))
    # The page lists both archives with position and lag, each with a Remove link
    page = client.get(reverse("admin:redisq_django_queue_change", args=[row.pk]))
    text = page.content.decode()
    assert f"<td>nightly</td><td>messages</td><td>{archived[3]}</td><td>6</td>" in text
    url = reverse("admin:redisq_django_queue_archive_remove", args=[queue_name, "nightly"])
    assert f'href="{url}"' in text
    # The link asks first (a GET changes nothing)
    confirm = client.get(url)
    assert confirm.status_code == 200
    assert b"Retention then no longer waits for it" in confirm.content
    assert {s.name for s in broker.archives.states(queue_name)} == {"nightly", "adhoc"}
    # Without a CSRF token: refused
    assert client.post(url).status_code == 403
    # With it: removed, reported, recorded in the queue's history
    token = confirm.cookies["csrftoken"].value
    done = client.post(url, {"csrfmiddlewaretoken": token})
    assert done.status_code == 302
    assert done["Location"] == reverse("admin:redisq_django_queue_change", args=[row.pk])
    assert [s.name for s in broker.archives.states(queue_name)] == ["adhoc"]
    assert changes() == [
        ("ops", queue_name, "Removed archive nightly: retention no longer waits for it")
    ]
    after = client.get(done["Location"])
    assert b"Removed archive nightly of" in after.content


def test_removing_needs_the_delete_permission(
    broker: Any, archived: list[str], queue_name: str
) -> None:
    Queue.objects.create(name=queue_name)
    url = reverse("admin:redisq_django_queue_archive_remove", args=[queue_name, "nightly"])
    viewer = Client()
    viewer.force_login(staff("viewer", "view_queue", "change_queue"))
    assert viewer.get(url).status_code == 403
    assert viewer.post(url).status_code == 403
    assert {s.name for s in broker.archives.states(queue_name)} == {"nightly", "adhoc"}
