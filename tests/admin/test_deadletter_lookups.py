"""The dead-letter list refuses pattern lookups in its querystring: a regex runs over
every payload in the database, and one that backtracks ties it up for anyone who may
view."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from redisq_django.admin import live
from redisq_django.connection import get_broker
from redisq_django.models import DeadLetter
from tests.support.live_data import live_consumer

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(redisq_settings: Any, queue_name: str) -> Client:
    """A user who may only view, with one dead letter in the database."""
    live.clear()
    live_consumer(get_broker(), queue_name)
    assert DeadLetter.objects.filter(queue=queue_name).count() == 1
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="redisq_django", codename__startswith="view_"
        )
    )
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    "query",
    ["payload__regex=(a%2B)%2B$", "payload__iregex=.*", "error_message__regex=declined"],
)
def test_pattern_lookups_are_refused_on_the_list_and_the_causes(viewer: Client, query: str) -> None:
    # When a view-only user asks for a pattern lookup in the querystring
    lists = reverse("admin:redisq_django_deadletter_changelist")
    causes = reverse("admin:redisq_django_deadletter_causes")
    got = [viewer.get(f"{lists}?{query}"), viewer.get(f"{causes}?status__exact=dead&{query}")]
    # Then no page runs it: the list answers 400 (a lookup the admin does not allow),
    # the causes page sends back to the list, and no row was shown
    assert got[0].status_code == 400
    assert got[1].status_code in (302, 400)
    dead = DeadLetter.objects.get()
    assert all(dead.message_id.encode() not in r.content for r in got)


def test_the_list_filters_by_its_fields_as_before(viewer: Client, queue_name: str) -> None:
    url = reverse("admin:redisq_django_deadletter_changelist")
    page = viewer.get(url, {"queue": queue_name, "payload__contains": "order"})
    dead = DeadLetter.objects.get(queue=queue_name)
    assert page.status_code == 200
    assert dead.message_id.encode() in page.content
