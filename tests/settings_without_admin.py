"""Settings of a worker-only project: no ``django.contrib.admin`` (nor its URLs, sessions
or messages), as docs/tutorial/install.md allows. tests/management/test_without_admin.py
runs every management command of ours with them, in processes of their own."""

from __future__ import annotations

from tests.settings import *  # noqa: F403

INSTALLED_APPS = [
    # The dead-letter rows name the user who retried them: auth is needed, the admin not.
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "redisq_django",
    "tests.workeronly",
]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "tests.urls_without_admin"
