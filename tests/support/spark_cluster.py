"""A Spark standalone cluster on loopback for tests: one master and one worker started
from the pyspark package's ``spark-class``, each in its own process group, every wait
bounded, both killed at the end.

Executors must not see the checkout: :func:`isolated_python` writes a wrapper that runs
the venv's interpreter with ``-S`` (no ``site``: the editable install's ``.pth`` finder
that points at the checkout is never processed) and only the venv's ``site-packages``
(redis-py, pyarrow...) and what Spark puts on ``PYTHONPATH`` (pyspark, py4j, the files the
job ships) on the path. Give it to the *driver* as ``PYSPARK_PYTHON``: executors start the
Python the driver names.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.redis_server import HOST, free_port

#: Longest wait for the master, then the worker, to come up (seconds).
START_TIMEOUT = 60.0


@dataclass(frozen=True)
class SparkCluster:
    """A running standalone cluster."""

    master_url: str
    log_dir: Path


def spark_home() -> Path:
    """The Spark distribution inside the pyspark package."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def isolated_python(directory: Path) -> Path:
    """Write (and return) a Python wrapper for executors that cannot import
    ``redisq_django`` except from what Spark ships."""
    site = sysconfig.get_paths()["purelib"]
    wrapper = directory / "executor-python"
    wrapper.write_text(
        "#!/bin/sh\n"
        "# Executors' Python: no site (the editable install's finder stays off), only the\n"
        "# venv's site-packages after what Spark puts on PYTHONPATH.\n"
        f'PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site}"\n'
        "export PYTHONPATH\n"
        f'exec "{sys.executable}" -S "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen[bytes], what: str) -> str:
    deadline = time.monotonic() + START_TIMEOUT
    regex = re.compile(pattern)
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        match = regex.search(text)
        if match:
            return match.group(0)
        if proc.poll() is not None:
            raise RuntimeError(f"the Spark {what} exited ({proc.returncode}): {text[-2000:]}")
        time.sleep(0.2)
    raise TimeoutError(f"the Spark {what} did not start within {START_TIMEOUT} s; see {log}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, SIGKILL it if it is still there after 10 s."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass


@contextmanager
def spark_cluster(directory: Path) -> Iterator[SparkCluster]:
    """Start a master and one worker (1 core, 1 GB) on 127.0.0.1; stop both at the end."""
    spark_class = str(spark_home() / "bin" / "spark-class")
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": HOST,
        "SPARK_LOG_DIR": str(directory),
        "SPARK_WORKER_DIR": str(directory / "work"),
        "SPARK_NO_DAEMONIZE": "1",
    }
    # Executors inherit the worker's environment: a PYTHONPATH naming the checkout (as a
    # worktree's test environment sets) would let them import what they must not.
    env.pop("PYTHONPATH", None)
    port = free_port()
    master_log = directory / "master.log"
    worker_log = directory / "worker.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with master_log.open("wb") as out:
            master = subprocess.Popen(
                [
                    spark_class,
                    "org.apache.spark.deploy.master.Master",
                    *("--host", HOST, "--port", str(port), "--webui-port", str(free_port())),
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        procs.append(master)
        url = f"spark://{HOST}:{port}"
        _wait_for(master_log, r"I have been elected leader", master, "master")
        with worker_log.open("wb") as out:
            worker = subprocess.Popen(
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    url,
                    *("--cores", "1", "--memory", "1g", "--host", HOST),
                    *("--webui-port", str(free_port()), "--work-dir", str(directory / "work")),
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        procs.append(worker)
        _wait_for(worker_log, r"Successfully registered with master", worker, "worker")
        yield SparkCluster(url, directory)
    finally:
        for proc in reversed(procs):
            _stop(proc)
