"""Browser tests of the admin: pytest-playwright driving Debian's chromium against
pytest-django's ``live_server``.

Playwright cannot download its own browser build here, so the ``browser_type_launch_args``
fixture points it at ``/usr/bin/chromium`` (``make test`` installs it through
.ci/ensure-chromium.sh). Never run ``playwright install`` for these tests.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import django.contrib.admin
import pytest

# The sync Playwright API runs an asyncio event loop in the test's thread, and Django
# refuses ORM calls from a thread with a running loop (SynchronousOnlyOperation). The
# tests and the live server only make ordinary blocking calls, so allow them. Set at
# import, i.e. before any test of this folder touches the ORM.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Screenshots kept as test artefacts (gitignored).
ARTIFACTS = REPO_ROOT / "test-artifacts"
#: The browser binary (Debian's package); REDISQ_CHROMIUM overrides it.
CHROMIUM = os.environ.get("REDISQ_CHROMIUM", "/usr/bin/chromium")
#: No network here: nothing in the background may try to reach one.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",  # we run as root in a container
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    """pytest-playwright's launch options, with Debian's chromium instead of a download."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"No chromium at {CHROMIUM}: run the tests with `make test`, which installs "
            "Debian's chromium package (.ci/ensure-chromium.sh), or set "
            "REDISQ_CHROMIUM=/path/to/chromium.",
            pytrace=False,
        )
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": [*browser_type_launch_args.get("args", []), *CHROMIUM_ARGS],
    }


@pytest.fixture(scope="session")
def base_url(live_server: Any) -> str:
    """The live server (so ``page.goto("/admin/")`` works).

    Also replaces pytest-playwright's own ``base_url`` (used when pytest-base-url is not
    installed), a session fixture defined as a plugin-class method: pytest 9 warns about
    those (PytestRemovedIn10Warning), which ``filterwarnings = error`` turns into a
    setup error of every browser test. Overriding it here needs no warning filter.
    """
    return str(live_server.url)


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_context_args, "viewport": {"width": 1680, "height": 900}}


@pytest.fixture(autouse=True)
def _admin_static_files(settings: Any) -> None:
    """Let the live server serve the admin's CSS and JavaScript.

    tests/settings.py does not install django.contrib.staticfiles, so the live server
    serves /static/ from STATIC_ROOT (read per request), which is unset: point it at
    the admin's own static folder, or the pages would run without their scripts.
    """
    settings.STATIC_ROOT = str(Path(django.contrib.admin.__file__).parent / "static")


@pytest.fixture
def output_path(output_path: str) -> str:
    """Artefacts of --screenshot/--tracing/--video go to the gitignored test-artifacts/."""
    return str(ARTIFACTS / "playwright" / Path(output_path).name)


@pytest.fixture
def artifacts() -> Path:
    """The folder for screenshots (created)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def ops() -> Any:
    """Superuser ``ops``, who logs in with ``tests.support.browser_pages.PASSWORD``."""
    from django.contrib.auth.models import User

    from tests.support.browser_pages import PASSWORD

    return User.objects.create_superuser("ops", password=PASSWORD)
