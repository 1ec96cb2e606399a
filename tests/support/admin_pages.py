"""What the tests of the admin and of ``manage.py redisq`` share: users and logged-in
clients, a real dead letter, the cells of a changelist, the admin history, and the
command's output. (The ``root`` and ``made`` fixtures of tests/admin are in its
conftest.py, built from these.)"""

from __future__ import annotations

import io
import re
from typing import Any

from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client

from redisq_django.models import DeadLetter

#: The password of the users these helpers make (the browser tests log in with theirs).
PASSWORD = "pw"


def staff(username: str, *perms: str, is_staff: bool = True, password: str = PASSWORD) -> User:
    """A user with these permissions (codenames), staff unless ``is_staff`` is False."""
    user = User.objects.create_user(username, password=password, is_staff=is_staff)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    return user


def superuser_client(username: str = "root", **client_options: Any) -> Client:
    """A test client logged in as a new superuser ``username``."""
    client = Client(**client_options)
    client.force_login(User.objects.create_superuser(username, password=PASSWORD))
    return client


def make_dead(
    broker: Any, queue: str, payload: Any, consumer: str = "billing", key: str | None = None
) -> DeadLetter:
    """A real dead letter: published, fetched, rejected, sunk into the database."""
    from redisq_django.deadletters.sinking import sink

    broker.consumers.ensure(queue, consumer)  # latest: only what is published next
    broker.publish(queue, payload, key=key)
    with broker.subscribe(queue, consumer) as sub:
        (message,) = sub.fetch(count=1, block_ms=500)
        sub.reject(message, ValueError("card declined <b>"))
    sink(queue, consumer)
    return DeadLetter.objects.get(queue=queue, consumer=consumer, message_id=message.id)


def cell(content: bytes, field: str, row: str = "") -> list[str]:
    """The text of each changelist cell of column ``field`` (tags stripped), in the rows
    that contain ``row`` (names read whole: without the ``<wbr>`` that lets them wrap)."""
    rows = re.findall(r"<tr>(.*?)</tr>", content.decode().replace("<wbr>", ""), re.S)
    cells = [
        c
        for r in rows
        if row in r
        for c in re.findall(rf'<td class="field-{field}[^"]*">(.*?)</td>', r, re.S)
    ]
    return [re.sub(r"<[^>]+>", "", c).strip() for c in cells]


def changes() -> list[tuple[str, str, str]]:
    """The admin history's change entries, oldest first: (username, object, message)."""
    return [
        (e.user.username, e.object_repr, e.get_change_message())
        for e in LogEntry.objects.order_by("pk")
        if e.action_flag == CHANGE
    ]


def redisq(*args: str) -> str:
    """What ``manage.py redisq ARGS`` writes to its standard output."""
    out = io.StringIO()
    call_command("redisq", *args, stdout=out)
    return out.getvalue()
