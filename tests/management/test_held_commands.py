"""An ordered consumer's held-back keys from the shell: ``manage.py redisq held QUEUE
CONSUMER`` lists what the live page's *Keys held back* shows (a key whatever it holds on
one line, a cut list said), ``manage.py redisq release-key`` lets the key's next message
go, says so, writes the admin history with ``--user`` and refuses a key not held."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.core.management.base import CommandError

from redisq_django.core.wire import visible as shown
from tests.support.admin_pages import redisq
from tests.support.held_data import CONSUMER, INSTANCE, ODD_KEY, Held, held_consumer

pytestmark = [pytest.mark.django_db, pytest.mark.site_broker]


@pytest.fixture
def made(broker: Any, queue_name: str) -> Held:
    User.objects.create_superuser("ops", password="pw")
    return held_consumer(broker, queue_name)


def test_held_lists_each_key_with_its_waiting_count_holder_and_why(made: Held) -> None:
    out = redisq("held", made.queue, CONSUMER)
    header, *lines = out.splitlines()
    assert header.split() == ["KEY", "WAITING", "HELD", "BY", "WHY"]
    rows = {line.split("  ")[0]: line for line in lines[:4]}
    # One line per key, whatever the key holds (its line break escaped), most waiting first
    assert list(rows) == [shown(ODD_KEY), "retry-me", "lost", "queued"]
    assert "\\n" in shown(ODD_KEY) and "🎉" in shown(ODD_KEY)
    for key, original in zip(rows, [ODD_KEY, "retry-me", "lost", "queued"], strict=True):
        fields = re.split(r"\s{2,}", rows[key][len(key) :].strip())
        assert fields[:2] == [str(made.waiting[original]), made.holders[original]], rows[key]
    assert rows[shown(ODD_KEY)].endswith(f"running on {INSTANCE}")
    assert re.search(r"retrying at \S+\+00:00 after: ValueError: card declined$", rows["retry-me"])
    assert rows["queued"].endswith("queued in the consumer's input")
    assert rows["lost"].endswith("holder not found: release the key to let its next message go")
    # A cut list says so
    cut = redisq("held", made.queue, CONSUMER, "--limit", "2")
    assert "(the 2 keys with the most messages waiting shown; more are held back)" in cut
    assert "lost" not in cut


def test_held_says_when_nothing_is_held_and_refuses_unknown_names(broker: Any, made: Held) -> None:
    broker.consumers.ensure(made.queue, "mailer")
    assert "No ordering key of" in redisq("held", made.queue, "mailer")
    with pytest.raises(CommandError, match="is not registered on queue"):
        redisq("held", made.queue, "nobody")


def test_release_key_lets_the_next_message_go_and_is_recorded(made: Held) -> None:
    # When the operator releases the key whose holder was lost, as user ops
    out = redisq("release-key", made.queue, CONSUMER, "lost", "--user", "ops")
    # Then they are told, the consumer receives the key's next message, the history has it
    assert f"Released ordering key 'lost' of {made.queue}/{CONSUMER}" in out
    got = made.sub.fetch(count=100, block_ms=200)
    assert [m.id for m in got if m.key == "lost"] == made.later["lost"][:1]
    [entry] = LogEntry.objects.all()
    assert (entry.user.username, entry.get_change_message()) == (
        "ops",
        "Released ordering key 'lost' by hand",
    )
    assert "lost" not in redisq("held", made.queue, CONSUMER)  # its next one holds, none waits
    # A key with a line break, markup and an emoji is named as it is
    redisq("release-key", made.queue, CONSUMER, ODD_KEY)
    got = made.sub.fetch(count=100, block_ms=200)
    assert [m.id for m in got if m.key == ODD_KEY] == made.later[ODD_KEY][:1]


def test_release_key_refuses_a_key_not_held(made: Held) -> None:
    with pytest.raises(CommandError, match="holds back nothing on"):
        redisq("release-key", made.queue, CONSUMER, "no-such-key")
    assert not LogEntry.objects.exists()
