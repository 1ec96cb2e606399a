"""A queue's number of partitions from the shell: ``manage.py redisq partitions QUEUE``
says what Redis records, ``... QUEUE K`` changes it only once the queue is drained (what
remains listed) and says that every process must be restarted with the new setting."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management.base import CommandError

from redisq_django.connection import get_broker
from redisq_django.core import PartitionsMismatch, Place, partition_of
from tests.support.admin_pages import redisq


@pytest.fixture
def partitioned(redisq_settings: Any, queue_name: str) -> Any:
    redisq_settings.REDISQ = {**redisq_settings.REDISQ, "PARTITIONS": {queue_name: 2}}
    return redisq_settings


def test_partitions_is_refused_until_drained_then_recorded(
    partitioned: Any, queue_name: str
) -> None:
    # Given a queue of 2 partitions with a consumer and a message it has not read
    broker = get_broker()
    broker.consumers.ensure(queue_name, "billing")
    sent = broker.publish(queue_name, {"n": 1}, key="k")
    assert redisq("partitions", queue_name) == f"{queue_name}: 2 partition(s) in Redis\n"
    # When asked for 4: refused, saying what remains, nothing changed
    with pytest.raises(CommandError, match="is not drained") as refused:
        redisq("partitions", queue_name, "4")
    assert f"{{{queue_name}#{partition_of('k', 2)}}}:log: messages not yet read by " in str(
        refused.value
    )
    assert redisq("partitions", queue_name).startswith(f"{queue_name}: 2 partition")
    # When the consumer has handled it: done, and the restart is asked for
    sub = broker.subscribe(Place(queue_name, partition_of("k", 2)), "billing", "i")
    [delivery] = sub.fetch(count=1, block_ms=1000)
    assert delivery.message.id == sent
    sub.ack([delivery])
    out = redisq("partitions", queue_name, "4")
    assert out.startswith(f"{queue_name}: 4 partition(s) recorded (were 2); consumers on ")
    assert "Restart every process" in out and "giving it 4" in out
    # Then a process still configured with 2 is refused, one with 4 works
    with pytest.raises(PartitionsMismatch):
        type(broker)(broker.client, broker.config).publish(queue_name, {"n": 2})
    partitioned.REDISQ = {**partitioned.REDISQ, "PARTITIONS": {queue_name: 4}}
    assert get_broker().consumers.names(queue_name) == ["billing"]
    get_broker().publish(queue_name, {"n": 3})


def test_partitions_refuses_a_count_out_of_range(partitioned: Any, queue_name: str) -> None:
    for bad in ("0", "65", "x"):
        with pytest.raises(CommandError, match="between 1 and 64"):
            redisq("partitions", queue_name, bad)


def test_partitions_names_a_record_that_is_no_clean_number(
    partitioned: Any, queue_name: str
) -> None:
    # Given a record another client wrote as "4.5"
    broker = get_broker()
    broker.client.hset(broker.keys(queue_name).meta, "partitions", "4.5")
    # Then showing it and changing it both end with one line naming the key and the value
    for args in ((queue_name,), (queue_name, "2")):
        with pytest.raises(CommandError) as refused:
            redisq("partitions", *args)
        text = str(refused.value)
        assert "'4.5'" in text and broker.keys(queue_name).meta in text
        assert "not a whole number from 1 to 64" in text and "\n" not in text
