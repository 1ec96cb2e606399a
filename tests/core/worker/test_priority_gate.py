"""The priority gate: a level fetches only while no higher level holds work."""

from __future__ import annotations

from redisq_django.core.worker.priority import GateSlot, PriorityGate


def test_lower_levels_wait_until_every_higher_thread_found_nothing() -> None:
    # Given threads of three levels, two at the highest
    gate = PriorityGate()
    high_a, high_b = GateSlot(gate, 0), GateSlot(gate, 0)
    normal, low = GateSlot(gate, 1), GateSlot(gate, 2)
    # Then before any fetch only the highest level may fetch
    assert [s.may_fetch() for s in (high_a, high_b, normal, low)] == [True, True, False, False]
    # When one high thread finds nothing, the other still holds work
    high_a.report(busy=False)
    assert not normal.may_fetch()
    # When both found nothing, normal may fetch; low waits for normal
    high_b.report(busy=False)
    assert normal.may_fetch() and not low.may_fetch()
    normal.report(busy=False)
    assert low.may_fetch()
    # And work at a higher level holds the lower ones back again
    high_a.report(busy=True)
    assert not normal.may_fetch() and not low.may_fetch() and high_b.may_fetch()
