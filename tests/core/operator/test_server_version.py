"""The version rule behind check W013 (Redis older than 6.2): no Redis that old is at
hand here, so the rule is tested on the version strings Redis reports."""

from __future__ import annotations

import pytest

from redisq_django.core.operator.server import MIN_VERSION, _version


@pytest.mark.parametrize(
    ("reported", "too_old"),
    [
        ("5.0.14", True),
        ("6.0.20", True),
        ("6.2.0", False),
        ("6.2.14", False),
        ("7.0.15", False),
        ("7.4.1", False),
        ("10.0.0", False),
        ("6.1.240", True),  # a release candidate of 6.2 reports 6.1.24x
        ("", True),  # unreadable: counted as 0.0 (the caller skips empty strings)
    ],
)
def test_versions_older_than_6_2_are_reported(reported: str, too_old: bool) -> None:
    assert (_version(reported) < MIN_VERSION) is too_old
