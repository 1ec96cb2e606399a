"""A private PostgreSQL cluster for the tests that run against PostgreSQL.

Like the redis-server fixtures, it never touches a shared database: ``initdb`` creates
a cluster in a fresh directory under the system temp dir, ``pg_ctl`` starts it on a
free 127.0.0.1 port (its socket in the same directory) and stops it at the end.

Binary discovery (:func:`find_pg_bin`):

* the directory in ``REDISQ_TEST_PG_BIN``;
* else the newest ``/usr/lib/postgresql/<version>/bin`` (Debian's ``postgresql``);
* else ``initdb`` and ``pg_ctl`` on ``PATH``.

``initdb`` refuses to run as root: when the tests run as root, every PostgreSQL
command runs as the ``postgres`` system user (``runuser -u postgres --``), and the
cluster directory is owned by that user. ``make test`` installs Debian's
``postgresql`` package when no ``initdb`` is found (see .ci/ensure-postgres.sh).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

HOST = "127.0.0.1"
BIN_ENV = "REDISQ_TEST_PG_BIN"
SYSTEM_USER = "postgres"
INITDB_TIMEOUT = 60.0
START_TIMEOUT = 30
STOP_TIMEOUT = 20
PORT_ATTEMPTS = 3


class PostgresServerError(RuntimeError):
    """The PostgreSQL cluster could not be created, started or stopped."""


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", path.parent.name)) or (0,)


def _has_tools(directory: Path) -> bool:
    return all(os.access(directory / tool, os.X_OK) for tool in ("initdb", "pg_ctl"))


def find_pg_bin() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or None when there is none."""
    env = os.environ.get(BIN_ENV)
    if env:
        return Path(env) if _has_tools(Path(env)) else None
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key)
    for directory in reversed(candidates):
        if _has_tools(directory):
            return directory
    initdb = shutil.which("initdb")
    if initdb:
        # Debian's /usr/bin wrappers and /usr/local/bin symlinks resolve to the real bin dir.
        directory = Path(initdb).resolve().parent
        if _has_tools(directory):
            return directory
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class PostgresServer:
    """A private PostgreSQL cluster on 127.0.0.1, created by :meth:`start`.

    Connect as user ``postgres`` (trust authentication) to :attr:`port`.
    """

    def __init__(self, bin_dir: str | os.PathLike[str]) -> None:
        self.bin_dir = Path(bin_dir)
        self.as_root = os.geteuid() == 0
        self.user = SYSTEM_USER
        self.root: Path | None = None
        self._port: int | None = None
        self.running = False

    # -- paths ---------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise PostgresServerError("PostgreSQL has not been started yet")
        return self._port

    @property
    def datadir(self) -> Path:
        assert self.root is not None
        return self.root / "data"

    @property
    def logfile(self) -> Path:
        assert self.root is not None
        return self.root / "postgres.log"

    def django_settings(self) -> dict[str, object]:
        """The ``DATABASES`` entries pointing Django at this cluster."""
        return {"HOST": HOST, "PORT": str(self.port), "USER": self.user, "PASSWORD": ""}

    # -- commands ------------------------------------------------------------

    def _run(self, tool: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin_dir / tool), *args]
        if self.as_root:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        try:
            return subprocess.run(
                cmd,
                cwd=self.root,  # the postgres user may not be able to enter the caller's cwd
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise PostgresServerError(
                f"{tool} did not finish within {timeout:.0f}s; log tail:\n{self._tail()}"
            ) from exc

    def _tail(self, lines: int = 30) -> str:
        try:
            text = self.logfile.read_text(errors="replace")
        except (OSError, AssertionError):
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> PostgresServer:
        """Create the cluster in a new temp dir and start it (bounded waits)."""
        if self.running:
            raise PostgresServerError(f"PostgreSQL on port {self._port} is already running")
        # Under the system temp dir, not pytest's basetemp: that one is mode 0700 and
        # the postgres user could not reach a cluster inside it.
        self.root = Path(tempfile.mkdtemp(prefix="redisq-pg-"))
        try:
            if self.as_root:
                account = pwd.getpwnam(self.user)
                os.chown(self.root, account.pw_uid, account.pw_gid)
            init = self._run(
                "initdb",
                "-D",
                str(self.datadir),
                "-A",
                "trust",
                "-U",
                self.user,
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
                timeout=INITDB_TIMEOUT,
            )
            if init.returncode != 0:
                raise PostgresServerError(
                    f"initdb failed with exit code {init.returncode}:\n{init.stdout}{init.stderr}"
                )
            last = ""
            for _ in range(PORT_ATTEMPTS):
                port = _free_port()
                if self._pg_ctl_start(port):
                    self._port = port
                    self.running = True
                    return self
                last = self._tail()
                if "could not bind" not in last and "in use" not in last:
                    break
            raise PostgresServerError(f"PostgreSQL did not start; log tail:\n{last}")
        except BaseException:
            self._kill()
            self._remove_root()
            raise

    def _pg_ctl_start(self, port: int) -> bool:
        options = (
            f"-p {port} -k {self.root} -h {HOST} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off"
        )
        result = self._run(
            "pg_ctl",
            "-D",
            str(self.datadir),
            "-l",
            str(self.logfile),
            "-o",
            options,
            "-w",
            "-t",
            str(START_TIMEOUT),
            "start",
            timeout=START_TIMEOUT + 10,
        )
        if result.returncode == 0:
            return True
        self._kill()  # pg_ctl may give up while the postmaster still starts
        return False

    def stop(self) -> None:
        """``pg_ctl stop -m fast``; SIGKILL the postmaster if that fails. Safe to call twice."""
        if self.root is None:
            return
        if self.running:
            try:
                result = self._run(
                    "pg_ctl",
                    "-D",
                    str(self.datadir),
                    "-m",
                    "fast",
                    "-w",
                    "-t",
                    str(STOP_TIMEOUT),
                    "stop",
                    timeout=STOP_TIMEOUT + 10,
                )
                if result.returncode != 0:
                    self._kill()
            except PostgresServerError:
                self._kill()
            self.running = False
        self._remove_root()

    def _kill(self) -> None:
        """SIGKILL the postmaster named in postmaster.pid (if any)."""
        if self.root is None:
            return
        pidfile = self.datadir / "postmaster.pid"
        try:
            pid = int(pidfile.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.05)

    def _remove_root(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<PostgresServer {HOST}:{self._port} {state} {self.bin_dir}>"
