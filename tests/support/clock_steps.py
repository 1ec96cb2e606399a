"""Wall clocks of worker processes that are skewed, or that the test steps mid-run.

A process started with :meth:`SteppedClock.env` (or :func:`skew_env`) in its
environment loads ``tests/support/skewed_clock/sitecustomize.py``, which offsets its
``time.time``/``time.time_ns`` and nothing else: its monotonic clock runs on, as a
host's does through an NTP step or a VM resume.
"""

from __future__ import annotations

import os
from pathlib import Path

import redis

SKEW_DIR = Path(__file__).resolve().parent / "skewed_clock"
SKEW_ENV = "REDISQ_TEST_CLOCK_SKEW_S"
SKEW_FILE_ENV = "REDISQ_TEST_CLOCK_SKEW_FILE"


def _path_env() -> str:
    return os.pathsep.join(p for p in (str(SKEW_DIR), os.environ.get("PYTHONPATH")) if p)


def skew_env(seconds: float) -> dict[str, str]:
    """Environment that skews a subprocess's wall clock by ``seconds``, constantly."""
    return {"PYTHONPATH": _path_env(), SKEW_ENV: str(seconds)}


class SteppedClock:
    """An offset that processes started with :meth:`env` apply to their wall clock; the
    test steps it with :meth:`step` (seen by those processes within 5 ms)."""

    def __init__(self, path: Path, offset_s: float = 0.0) -> None:
        self.path = path
        self.offset_s = offset_s
        self.step(offset_s)

    def env(self) -> dict[str, str]:
        return {"PYTHONPATH": _path_env(), SKEW_FILE_ENV: str(self.path)}

    def step(self, offset_s: float) -> None:
        """Set the processes' clocks ``offset_s`` seconds off the true time, at once
        (written aside and renamed: a reader never sees half a number)."""
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(f"{offset_s}\n")
        os.replace(tmp, self.path)
        self.offset_s = offset_s


def redis_ms(client: redis.Redis) -> int:
    """Redis's clock (``TIME``), ms since the epoch."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000
