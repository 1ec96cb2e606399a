"""Skews this process's wall clock by ``$REDISQ_TEST_CLOCK_SKEW_S`` seconds.

The clock-skew tests (tests/test_clock_skew.py) put this directory first on the
``PYTHONPATH`` of one subprocess, so that process behaves as if it ran on a host whose
clock is off by that much: ``time.time()`` and ``time.time_ns()`` are offset (Redis and
the other processes keep the true time). Monotonic clocks are left alone, as a skewed
host's are.
"""

from __future__ import annotations

import os
import time

_SKEW_S = float(os.environ.get("REDISQ_TEST_CLOCK_SKEW_S") or 0)

if _SKEW_S:
    _true_time, _true_time_ns = time.time, time.time_ns
    _SKEW_NS = int(_SKEW_S * 1_000_000_000)

    def _skewed_time() -> float:
        return _true_time() + _SKEW_S

    def _skewed_time_ns() -> int:
        return _true_time_ns() + _SKEW_NS

    time.time = _skewed_time
    time.time_ns = _skewed_time_ns
