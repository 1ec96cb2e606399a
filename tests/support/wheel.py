"""The wheel of this tree, built once per test session and shared by the tests that need
one (tests/test_packaging.py, tests/docs/test_tutorial.py), whichever xdist process asks
first: the others wait for it on a lock, then reuse it. Two builds at once would also
share setuptools' ``build/`` folder in the tree."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 300


def session_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel ``pip wheel`` builds from this tree (no dependencies), built by the first
    caller of the session (every xdist process shares the base temporary directory's
    parent) and reused by the others."""
    base = tmp_path_factory.getbasetemp()
    # Under xdist each process has a basetemp of its own (popen-gwN) in the run's.
    shared = base.parent if base.name.startswith("popen-gw") else base
    out_dir = shared / "redisq-wheel"
    out_dir.mkdir(exist_ok=True)
    with open(shared / "redisq-wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the build's own timeout bounds the wait
        try:
            built = sorted(out_dir.glob("redisq_django-*.whl"))
            if not built:
                build = ["wheel", "--no-deps", "-q", "-w", str(out_dir), str(ROOT)]
                out = subprocess.run(
                    [sys.executable, "-m", "pip", *build],
                    capture_output=True,
                    text=True,
                    timeout=BUILD_TIMEOUT,
                )
                assert out.returncode == 0, out.stderr
                built = sorted(out_dir.glob("redisq_django-*.whl"))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    (wheel,) = built
    return wheel
