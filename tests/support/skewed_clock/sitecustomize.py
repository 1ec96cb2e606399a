"""Skews this process's wall clock, by a constant or by an offset the test steps.

The clock tests (tests/faults/test_clock_skew.py, and tests/schedules/ through
tests/support/clock_steps.py) put this directory first on the ``PYTHONPATH`` of one
subprocess, so that process behaves as if it ran on a host whose clock is off:
``time.time()`` and ``time.time_ns()`` are offset (Redis and the other processes keep
the true time).

* ``$REDISQ_TEST_CLOCK_SKEW_S``: a constant offset, seconds.
* ``$REDISQ_TEST_CLOCK_SKEW_FILE``: a file holding the offset in seconds, read again
  at most every :data:`_RECHECK_NS` (5 ms), so the test can *step* the clock mid-run
  by rewriting it (atomically: write another file, then ``os.replace``), as an NTP step
  or a resumed VM does. A missing or unreadable file keeps the offset read last.

Monotonic clocks are left alone and stay continuous through a step, as a real host's
are: that is what tells a wall-clock step from elapsed time.
"""

from __future__ import annotations

import os
import time

_SKEW_S = float(os.environ.get("REDISQ_TEST_CLOCK_SKEW_S") or 0)
_SKEW_FILE = os.environ.get("REDISQ_TEST_CLOCK_SKEW_FILE") or ""
#: How often the offset file is read again at most, ns (a step shows within 5 ms).
_RECHECK_NS = 5_000_000

_true_time, _true_time_ns, _mono_ns = time.time, time.time_ns, time.monotonic_ns
#: (offset in ns, monotonic ns when the file was read); one tuple, so a thread that
#: reads it while another replaces it sees one consistent pair.
_state = (int(_SKEW_S * 1_000_000_000), -_RECHECK_NS)


def _offset_ns() -> int:
    global _state
    offset, read_at = _state
    now = _mono_ns()
    if now - read_at < _RECHECK_NS:
        return offset
    try:
        with open(_SKEW_FILE) as f:
            offset = int(float(f.read().strip() or 0) * 1_000_000_000)
    except (OSError, ValueError):
        pass  # keep the offset read last (the file is being replaced, or not there yet)
    _state = (offset, now)
    return offset


if _SKEW_FILE:

    def _stepped_time() -> float:
        return _true_time() + _offset_ns() / 1e9

    def _stepped_time_ns() -> int:
        return _true_time_ns() + _offset_ns()

    time.time = _stepped_time
    time.time_ns = _stepped_time_ns

elif _SKEW_S:
    _SKEW_NS = _state[0]

    def _skewed_time() -> float:
        return _true_time() + _SKEW_S

    def _skewed_time_ns() -> int:
        return _true_time_ns() + _SKEW_NS

    time.time = _skewed_time
    time.time_ns = _skewed_time_ns
