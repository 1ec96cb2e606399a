"""What the live pages do, from the shell: ``manage.py redisq deliver-now`` and ``manage.py
redisq purge QUEUE --consumer C`` change exactly what the admin's actions change, say what
they did, write the same admin history with ``--user``, and refuse unknown names with
what to do."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError

from redisq_django.connection import get_broker
from redisq_django.core.keys import registry_key
from tests.support.admin_pages import changes, redisq
from tests.support.live_data import Live, live_consumer

pytestmark = [pytest.mark.django_db, pytest.mark.site_broker]


@pytest.fixture
def made(broker: Any, queue_name: str) -> Live:
    User.objects.create_superuser("ops", password="pw")
    return live_consumer(broker, queue_name)


def consumers(broker: Any, queue: str) -> dict[str, Any]:
    return {c.name: c for c in broker.stats(queue).consumers}


# -- deliver-now ----------------------------------------------------------------------------


def test_deliver_now_delivers_the_named_delayed_message_next_and_records_it(
    broker: Any, made: Live
) -> None:
    # Given email with nothing left to do, and two messages delayed by an hour
    with broker.subscribe(made.queue, "email") as sub:
        sub.ack(sub.fetch(count=100, block_ms=100))
    listing = redisq("deliver-now", made.queue, "--list")
    assert all(i in listing for i in made.delayed)
    header, *lines = listing.splitlines()
    assert header.split()[:3] == ["ID", "KEY", "DUE"]
    assert {line.split()[1] for line in lines if line.split()[0] in made.delayed} == {
        "order-0",
        "order-1",
    }

    # When the operator delivers the second one now, as user ops
    out = redisq("deliver-now", made.queue, made.delayed[1], "--user", "ops")

    # Then they are told, email receives exactly it next, the other stays delayed
    assert f"Delivered 1 delayed message of {made.queue} now." in out
    with broker.subscribe(made.queue, "email") as sub:
        got = sub.fetch(count=100, block_ms=200)
        sub.ack(got)
    assert [m.id for m in got] == [made.delayed[1]]
    assert broker.stats(made.queue).delayed == 1
    # ... and the queue's history says so, in the words of the live page's action
    assert changes() == [("ops", made.queue, f"Delivered now: delayed message {made.delayed[1]}")]


def test_deliver_now_all_retries_of_a_consumer_go_to_it_alone(broker: Any, made: Live) -> None:
    # Given billing with 2 retries waiting for their backoff
    before = consumers(broker, made.queue)
    assert before["billing"].waiting_retry == 2

    # When the operator delivers all of billing's retries now
    out = redisq("deliver-now", made.queue, "--consumer", "billing", "--all", "--user", "ops")

    # Then both wait in billing's private input, first in line; email is not touched
    assert f"Delivered 2 retries of {made.queue}/billing now." in out
    after = consumers(broker, made.queue)
    assert (after["billing"].waiting_retry, after["billing"].direct) == (0, 2)
    assert after["email"].backlog == before["email"].backlog
    with broker.subscribe(made.queue, "billing", "worker-2") as sub:
        got = sub.fetch(count=100, block_ms=200)
    assert set(made.retrying) <= {m.id for m in got}
    assert {m.attempts for m in got if m.id in made.retrying} == {2}
    assert changes() == [
        ("ops", f"{made.queue}/billing", "Delivered now: 2 retries (all that waited)")
    ]


def test_deliver_now_says_what_is_wrong_and_changes_nothing(
    broker: Any, made: Live, queue_name: str
) -> None:
    # An unknown queue or consumer, no ids, both ids and --all: refused, with what to do
    with pytest.raises(CommandError, match=r"unknown to Redis.*redisq status"):
        redisq("deliver-now", "no-such-queue", "--all")
    with pytest.raises(CommandError, match=r"'nobody' is not registered.*billing, email"):
        redisq("deliver-now", made.queue, "--consumer", "nobody", "--all")
    with pytest.raises(CommandError, match=r"Name the delayed messages.*--list"):
        redisq("deliver-now", made.queue)
    with pytest.raises(CommandError, match="either IDs or --all"):
        redisq("deliver-now", made.queue, made.delayed[0], "--all")
    with pytest.raises(CommandError, match="No user 'ghost'"):
        redisq("deliver-now", made.queue, "--all", "--user", "ghost")
    # A retry's id given as a delayed message: not found, and the way to name it
    with pytest.raises(CommandError, match=rf"{made.retrying[0]}.*--consumer"):
        redisq("deliver-now", made.queue, made.retrying[0])
    # Nothing was delivered and nothing recorded
    stats = broker.stats(made.queue)
    assert (stats.delayed, consumers(broker, made.queue)["billing"].waiting_retry) == (2, 2)
    assert changes() == []


def test_deliver_now_leaves_an_entry_another_client_wrote_and_says_so(
    broker: Any, made: Live
) -> None:
    # Given, among the queue's delayed messages, a member that is no JSON object of strings
    delayed = broker.keys(made.queue).delayed
    broker.client.zadd(delayed, {b"not an envelope": 4_000_000_000_000})
    listing = redisq("deliver-now", made.queue, "--list")
    (odd,) = [line.split()[0] for line in listing.splitlines()[1:] if "not an env" in line]

    # When the operator delivers it by its id, or all of them: refused, the rest delivered
    with pytest.raises(CommandError, match=rf"Not delivered, 1 entry .*: {odd}\..*end or delete"):
        redisq("deliver-now", made.queue, odd)
    assert broker.client.zscore(delayed, b"not an envelope") is not None
    with pytest.raises(CommandError, match=rf"Not delivered, 1 entry .*: {odd}\."):
        redisq("deliver-now", made.queue, "--all")

    # Then it stays delayed, alone; the two messages went to the log
    assert broker.client.zrange(delayed, 0, -1) == [b"not an envelope"]
    log = [f.get(b"id", b"").decode() for _, f in broker.client.xrange(broker.keys(made.queue).log)]
    assert set(made.delayed) <= set(log)


# -- end ------------------------------------------------------------------------------------


def test_end_makes_a_retry_a_dead_letter_and_marks_a_waiting_message_and_records_both(
    broker: Any, made: Live
) -> None:
    # When the operator ends one of billing's retries and one message waiting in the log
    retry, waiting = made.retrying[0], made.waiting[2]
    out = redisq("end", made.queue, "billing", retry, waiting, "--user", "ops")

    # Then the retry is billing's dead letter now, the waiting one is marked
    assert f"Ended (dead letters now): 1 message(s) of {made.queue}/billing: {retry}." in out
    assert f"Marked 1 message(s) waiting in the log for {made.queue}/billing: {waiting}." in out
    billing = broker.keys(made.queue).group("billing")
    letters = broker.client.xrange(billing.dead)
    assert [f[b"id"].decode() for _, f in letters][-1] == retry
    with broker.subscribe(made.queue, "billing", "worker-2") as sub:
        got = sub.fetch(count=100, block_ms=200)
        sub.ack(got)
    assert waiting not in {m.id for m in got} and made.waiting[0] in {m.id for m in got}
    dead = [(f[b"id"].decode(), f[b"reason"]) for _, f in broker.client.xrange(billing.dead)]
    assert dead[-1] == (waiting, b"ended")
    # ... and billing's history says both, as the live pages write them
    assert changes() == [
        ("ops", f"{made.queue}/billing", f"Ended (dead letters now): 1 message(s): {retry}"),
        (
            "ops",
            f"{made.queue}/billing",
            "Ended before their consumers read them (dead letters (reason ended) when read, "
            f"never run): 1 message(s): {waiting}; for billing",
        ),
    ]


def test_end_delete_asks_first_and_an_unknown_id_is_named(
    broker: Any, made: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("builtins.input", lambda prompt: "email")
    with pytest.raises(CommandError, match="Not confirmed; nothing was deleted"):
        redisq("end", made.queue, "billing", made.waiting[0], "--delete")
    assert broker.client.exists(broker.keys(made.queue).group("billing").ended) == 0
    # An in-flight message is not ended (its instance settles it), an unknown id is named
    with pytest.raises(CommandError, match=r"Not waiting for .*billing.*: no-such-id"):
        redisq("end", made.queue, "billing", "no-such-id", "--delete", "--yes")
    with pytest.raises(
        CommandError, match=rf"in flight, or handled meanwhile\): {made.in_flight[0]}"
    ):
        redisq("end", made.queue, "billing", made.in_flight[0], "--yes")
    assert changes() == []


# -- purge --consumer -----------------------------------------------------------------------


def test_purge_of_a_consumer_asks_for_its_name_then_discards_what_waits_for_it_alone(
    broker: Any, made: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = consumers(broker, made.queue)
    # Given an operator who types the queue's name instead of the consumer's
    monkeypatch.setattr("builtins.input", lambda prompt: made.queue)
    with pytest.raises(CommandError, match="Not confirmed; nothing was purged"):
        redisq("purge", made.queue, "--consumer", "billing")
    assert consumers(broker, made.queue)["billing"].backlog == len(made.waiting)

    # When they type the consumer's name
    monkeypatch.setattr("builtins.input", lambda prompt: "billing")
    out = redisq("purge", made.queue, "--consumer", "billing", "--user", "ops")

    # Then nothing waits for billing, its messages in flight stay, email keeps its backlog
    assert f"skipped {len(made.waiting)} message(s) of its backlog" in out
    assert "discarded 2 retries and 0 message(s) of its private input" in out
    after = consumers(broker, made.queue)
    assert (after["billing"].backlog, after["billing"].waiting_retry) == (0, 0)
    assert after["billing"].in_flight == len(made.in_flight)
    assert after["email"].backlog == before["email"].backlog
    assert broker.stats(made.queue).delayed == 2
    # ... and billing's history says so, in the words of the live page's action
    assert changes() == [
        (
            "ops",
            f"{made.queue}/billing",
            "Purged: skipped its backlog, discarded 2 retries and 0 re-driven",
        )
    ]


def test_purge_of_an_unknown_consumer_is_refused_before_asking(
    broker: Any, made: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_question(prompt: str) -> str:
        raise AssertionError("asked for confirmation")

    monkeypatch.setattr("builtins.input", no_question)
    with pytest.raises(CommandError, match=r"'bill' is not registered.*billing, email"):
        redisq("purge", made.queue, "--consumer", "bill")
    assert consumers(broker, made.queue)["billing"].backlog == len(made.waiting)


def test_purge_of_a_queue_with_yes_and_user_is_recorded(broker: Any, made: Live) -> None:
    assert redisq("purge", made.queue, "--yes", "--user", "ops").strip() == f"Purged {made.queue}."
    stats = broker.stats(made.queue)
    assert (stats.length, stats.delayed, stats.total("backlog")) == (0, 0, 0)
    assert changes() == [("ops", made.queue, "Purged the queue's messages in Redis")]


def test_purge_refuses_while_an_archive_lags_unless_forced_and_says_what_is_lost(
    broker: Any, made: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given archive "default" that has stored none of the queue's 12 messages, and
    # "nightly" that has stored all but the last
    log = [i.decode() for i, _ in broker.client.xrange(broker.keys(made.queue).log)]
    assert len(log) == 12
    broker.archives.register(made.queue, "default", "messages", "earliest")
    broker.archives.register(made.queue, "nightly", "messages", log[-2])
    # When the operator purges the queue, even with --yes: refused, nothing deleted
    with pytest.raises(CommandError) as refused:
        redisq("purge", made.queue, "--yes")
    assert str(refused.value) == (
        "Nothing was deleted: 12 messages not yet archived by 'default' will be lost; "
        "1 message not yet archived by 'nightly' will be lost. Let the archive job store "
        "them first (python -m redisq_django.pipeline archive), or purge anyway with --force."
    )
    assert broker.stats(made.queue).length == 12
    # When forced: the question says what is lost, and the typed name purges
    asked: list[str] = []
    monkeypatch.setattr("builtins.input", lambda q: asked.append(q) or made.queue)
    err = io.StringIO()
    call_command("redisq", "purge", made.queue, "--force", stdout=io.StringIO(), stderr=err)
    assert err.getvalue().splitlines() == [
        "Warning: 12 messages not yet archived by 'default' will be lost (--force).",
        "Warning: 1 message not yet archived by 'nightly' will be lost (--force).",
    ]
    assert len(asked) == 1 and broker.stats(made.queue).length == 0
    # Then each archive's gap record has what it lost, as a purge's
    gap = broker.archives.gap(made.queue, "default", "messages")
    assert gap is not None and gap.purge is not None
    assert (gap.first, gap.last, gap.count, gap.purge.count) == (log[0], log[-1], 12, 12)
    nightly = broker.archives.gap(made.queue, "nightly", "messages")
    assert nightly is not None and (nightly.first, nightly.count) == (log[-1], 1)
    # And `redisq archives` shows the gap as a purge's
    listing = redisq("archives", "--queue", made.queue)
    assert f"{log[0]} to {log[-1]} (12) removed by a purge at " in listing
    assert "hard cap" not in listing
    # And with nothing left to lose, no --force is needed
    assert redisq("purge", made.queue, "--yes").strip() == f"Purged {made.queue}."


def test_with_redis_stopped_the_commands_say_so(
    settings: Any, volatile_redis_server: Any, queue_name: str
) -> None:
    # Given a queue with a consumer on a Redis that then stops
    settings.REDISQ = {"URL": volatile_redis_server.url}
    get_broker().consumers.ensure(queue_name, "billing")
    volatile_redis_server.stop()
    # When the operator delivers or purges: an error that says what to do, no traceback
    says = r"Cannot reach Redis.*Check that the server is running"
    with pytest.raises(CommandError, match=says):
        redisq("deliver-now", queue_name, "--all")
    with pytest.raises(CommandError, match=says):
        redisq("purge", queue_name, "--consumer", "billing", "--yes")


def test_a_registry_member_that_is_no_queue_name_leaves_the_commands_up(
    broker: Any, made: Live, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a member "evil/name" in the queue registry, which any Redis client may write
    # (removed after: the registry is shared by every test of the session)
    registry = registry_key(broker.config.prefix)
    broker.client.sadd(registry, "evil/name")
    try:
        # When the commands that list every queue run
        status = redisq("status")
        archives = redisq("archives")
    finally:
        broker.client.srem(registry, "evil/name")
    # Then they list the real queue, leave the bad name out and say so in the log
    assert queue_name in status and "evil/name" not in status
    assert "evil/name" not in archives
    assert any("evil/name" in r.getMessage() for r in caplog.records)
