"""Where an ordered consumer's key holders are (``HeldKey.ref``), and the operator's
``held_keys`` / ``release_key`` (core/ordered.py through ``broker.operator``): each ref
finds its holder again with ``operator.find``, as the admin's message page does. Real
Redis."""

from __future__ import annotations

import pytest

from redisq_django.core import Broker

pytestmark = pytest.mark.core_config(poll_interval_ms=20)


def test_each_holder_found_has_a_ref_that_finds_it_again(broker: Broker, queue_name: str) -> None:
    # Given holders running (from the log), retrying, queued in the input, and found nowhere
    broker.consumers.ensure(queue_name, "ledger")
    ids = {k: broker.publish_many(queue_name, [{"n": n} for n in range(3)], key=k)
           for k in ("run", "retry", "queued", "lost")}  # fmt: skip
    sub = broker.subscribe(
        queue_name, "ledger", "i1", ordered=True, backoff_s=600, max_backoff_s=600
    )
    got = {d.key: d for d in sub.fetch(count=100, block_ms=100)}
    sub.fail(got["retry"], RuntimeError("boom"))
    sub.ack([got["queued"]])
    broker.client.xack(broker.keys(queue_name).log, sub.gkeys.group, got["lost"].entry_id)

    # When the operator reads the held keys
    held = {h.key: h for h in broker.operator.held_keys(queue_name, "ledger")}

    # Then each found holder's ref names where it is, and finds that very message
    assert {k: (h.state, (h.ref or "").split(":")[0]) for k, h in held.items()} == {
        "run": ("running", "log"),
        "retry": ("retrying", "retry"),
        "queued": ("queued", "direct"),
        "lost": ("unknown", ""),
    }
    assert held["lost"].ref is None
    for key in ("run", "retry", "queued"):
        ref = held[key].ref
        assert ref is not None
        entry = broker.operator.find(queue_name, "ledger", ref)
        assert entry is not None and entry.message_id == held[key].holder, key
    assert held["queued"].holder == ids["queued"][1]
    assert broker.operator.held_keys(queue_name, "ledger", limit=1)[0].key in held


def test_the_operator_releases_a_key(broker: Broker, queue_name: str) -> None:
    broker.consumers.ensure(queue_name, "ledger")
    ids = broker.publish_many(queue_name, [{"n": n} for n in range(2)], key="a")
    sub = broker.subscribe(queue_name, "ledger", "i1", ordered=True)
    [first] = sub.fetch(count=10, block_ms=100)
    assert broker.operator.release_key(queue_name, "ledger", "a") is True
    assert [m.id for m in sub.fetch(count=10, block_ms=100)] == [ids[1]]  # beside the first
    assert broker.operator.release_key(queue_name, "ledger", "zzz") is False
    assert first.id == ids[0]
