"""The release as a user gets it: sdist and wheel built, twine-checked, the wheel installed
with the pipeline extra into a fresh virtualenv and run outside the source tree."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

import redisq_django
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[1]

# The build and the install (the module's fixture, timed with its first test) take one to
# two minutes on 2 cores, several when the machine is loaded.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

# Never copied into the build: local environments, caches and build output (anywhere),
# the worktree's git data and the demo's state (at the top).
_JUNK_ANYWHERE = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis"}
_JUNK_AT_TOP = {".git", ".tox", "build", "dist", "test-artifacts"}


def _ignore(directory: str, names: list[str]) -> set[str]:
    junk = {n for n in names if n in _JUNK_ANYWHERE or n.endswith(".egg-info") or n == ".demo"}
    if Path(directory) == ROOT:  # .venv, .venv-demo, a developer's .venv-3.11...
        junk |= {n for n in names if n in _JUNK_AT_TOP or n.startswith(".venv")}
    return junk


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: nothing pointing at this checkout or this venv."""
    # DJANGO_*: the test process's, e.g. DJANGO_ALLOW_ASYNC_UNSAFE, which the browser
    # tests' Playwright sets and check --deploy refuses (async.E001).
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"} and not k.startswith("DJANGO_")
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.update(extra)
    return env


def _run(
    args: Sequence[str | os.PathLike[str]], *, cwd: Path, timeout: float, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``args`` with a clean environment; fail the test with its output if it fails."""
    out = subprocess.run(
        [os.fspath(a) for a in args],
        cwd=cwd,
        env=_clean_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, f"{args} exited {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out


@dataclass(frozen=True)
class Release:
    sdist: Path
    wheel: Path
    venv: Path
    python: Path
    outside: Path  # a working directory with no source tree in it


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    """Build the sdist and the wheel from a copy of the tree, install the wheel with the
    pipeline extra into a fresh virtualenv (pip's cache makes it ~40 s, not minutes)."""
    base = tmp_path_factory.mktemp("release")
    source, dist, venv, outside = base / "src", base / "dist", base / "venv", base / "home"
    shutil.copytree(ROOT, source, ignore=_ignore)
    outside.mkdir()
    # The build runs in its own isolated environment (setuptools from the index), as a
    # maintainer's and a CI's `python -m build` does.
    _run([sys.executable, "-m", "build", "--outdir", dist, source], cwd=outside, timeout=300)
    (sdist,) = dist.glob("redisq_django-*.tar.gz")
    (wheel,) = dist.glob("redisq_django-*.whl")
    _run([sys.executable, "-m", "venv", venv], cwd=outside, timeout=120)
    python = venv / "bin" / "python"
    _run([python, "-m", "pip", "install", "-q", f"{wheel}[pipeline]"], cwd=outside, timeout=600)
    return Release(sdist=sdist, wheel=wheel, venv=venv, python=python, outside=outside)


def test_distributions_are_named_by_the_version_and_pass_twine_check(release: Release) -> None:
    version = redisq_django.__version__
    assert release.wheel.name == f"redisq_django-{version}-py3-none-any.whl"
    assert release.sdist.name == f"redisq_django-{version}.tar.gz"
    # --strict: the long description (README.md) renders, and nothing is missing.
    out = _run(
        [sys.executable, "-m", "twine", "check", "--strict", release.sdist, release.wheel],
        cwd=release.outside,
        timeout=120,
    )
    assert out.stdout.count("PASSED") == 2, out.stdout


def test_sdist_carries_the_whole_test_suite_and_no_caches(release: Release) -> None:
    # A packager builds and tests from the sdist: the suite comes whole (its support
    # modules and apps, not only setuptools' default tests/test*.py), never bytecode.
    top = release.sdist.name.removesuffix(".tar.gz")
    with tarfile.open(release.sdist) as sdist:
        names = {n.removeprefix(f"{top}/") for n in sdist.getnames()}
    for needed in (
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "CHANGELOG.md",
        "PROTOCOL.md",
        "redisq_django/core/scripts/publish_once.lua",
        "redisq_django/core/scripts/source/publish_once.lua",
        "redisq_django/core/scripts/fragments/protocol.lua",
        "tests/conftest.py",
        "tests/support/redis_server.py",
        "tests/shopapp/models.py",
    ):
        assert needed in names, needed
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".pyo"))]


def test_installed_package_and_pyspark_come_from_the_venv(release: Release) -> None:
    out = _run(
        [
            release.python,
            "-c",
            "import redisq_django, pyspark; print(redisq_django.__file__); "
            "print(pyspark.__file__); print(redisq_django.__version__)",
        ],
        cwd=release.outside,
        timeout=60,
    )
    package, pyspark, version = out.stdout.split()
    assert Path(package).is_relative_to(release.venv / "lib"), package
    assert Path(pyspark).is_relative_to(release.venv / "lib"), pyspark
    assert version == redisq_django.__version__


def test_the_installed_package_assembles_the_scripts_it_ships(release: Release) -> None:
    # The loader assembles from the sources and fragments the wheel carries, to the very
    # text of the assembled files it ships beside them (what other languages load)
    code = (
        "from pathlib import Path; import redisq_django.core.scripts as s; "
        "print(all(s.script_source(n) == (Path(s.__file__).parent / f'{n}.lua').read_text() "
        "for n in s.SCRIPT_NAMES))"
    )
    out = _run([release.python, "-c", code], cwd=release.outside, timeout=60)
    assert out.stdout.strip() == "True"
    listed = _run(
        [release.python, "-m", "redisq_django.core.scripts", "list"],
        cwd=release.outside,
        timeout=60,
    )
    assert "  fail.lua" in listed.stdout


def test_pipeline_command_line_runs_from_the_wheel(release: Release) -> None:
    out = _run(
        [release.python, "-m", "redisq_django.pipeline", "--help"],
        cwd=release.outside,
        timeout=120,
    )
    for job in ("archive", "report", "replay", "compact", "files"):
        assert job in out.stdout


SETTINGS = """\
\"\"\"A minimal production-like site using the installed redisq_django.\"\"\"

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = os.environ["SITE_SECRET_KEY"]
DEBUG = False
ALLOWED_HOSTS = ["site.example"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "redisq_django",
    "ledger",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "site_config.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "db.sqlite3"}
}
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# What `check --deploy` asks of a site served over HTTPS.
SECURE_SSL_REDIRECT = True
SECURE_HSTS_SECONDS = 31536000
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
REDISQ = {"URL": os.environ["SITE_REDIS_URL"], "MAX_RETRIES": 0}
LEDGER = BASE_DIR / "ledger.jsonl"
"""

URLS = """\
from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
"""

CONSUMERS = """\
import json

from django.conf import settings

from redisq_django import Message, consumer


# earliest: the message is published before the first worker registers the consumer.
@consumer("orders", name="ledger", start="earliest")
def record(message: Message) -> None:
    with open(settings.LEDGER, "a") as ledger:
        ledger.write(json.dumps({"id": message.id, "payload": message.payload}) + "\\n")
"""

MANAGE = """\
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "site_config.settings")
from django.core.management import execute_from_command_line

execute_from_command_line(sys.argv)
"""

# The admin's pages render from the wheel's templates (a superuser, over "HTTPS").
ADMIN_PAGE = """\
from django.contrib.auth.models import User
from django.test import Client

client = Client(HTTP_HOST="site.example")
client.force_login(User.objects.create_superuser("admin", "a@site.example", "x"))
for url in ("/admin/redisq_django/deadletter/", "/admin/redisq_django/queue/"):
    response = client.get(url, secure=True)
    print(url, response.status_code, "redisq" in response.content.decode())
"""


def _write_site(root: Path) -> None:
    files = {
        "manage.py": MANAGE,
        "site_config/__init__.py": "",
        "site_config/settings.py": SETTINGS,
        "site_config/urls.py": URLS,
        "ledger/__init__.py": "",
        "ledger/consumers.py": CONSUMERS,
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_a_django_site_migrates_passes_deploy_checks_publishes_and_consumes(
    release: Release, fresh_redis_server: RedisServer
) -> None:
    # Given a site of its own (no source tree beside it, PYTHONPATH unset) on the
    # installed wheel, and a private Redis configured as the guarantees ask (AOF, fsync)
    site = release.outside / "site"
    _write_site(site)
    env = {"SITE_SECRET_KEY": secrets.token_urlsafe(50), "SITE_REDIS_URL": fresh_redis_server.url}

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return _run([release.python, "manage.py", *args], cwd=site, timeout=120, **env)

    # When it migrates and runs the deploy checks
    manage("migrate", "--verbosity", "0")
    checks = manage("check", "--deploy")

    # Then no check speaks, redisq's least of all
    assert "System check identified no issues" in checks.stdout, checks.stdout + checks.stderr
    assert "redisq" not in (checks.stdout + checks.stderr).lower()

    # When a message is published from the shell and a burst worker runs
    publish = "import redisq_django; print('id', redisq_django.publish('orders', {'order': 7}))"
    (message_id,) = [
        line.removeprefix("id ")
        for line in manage("shell", "-c", publish).stdout.splitlines()
        if line.startswith("id ")
    ]
    manage("runconsumer", "orders", "--burst", "--stats-interval", "0")

    # Then the handler recorded exactly that message, once
    lines = (site / "ledger.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"id": message_id, "payload": {"order": 7}}]

    # And the admin's pages render from the installed templates
    pages = manage("shell", "-c", ADMIN_PAGE).stdout.split("\n")
    assert "/admin/redisq_django/deadletter/ 200 True" in pages
    assert "/admin/redisq_django/queue/ 200 True" in pages
