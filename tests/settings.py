"""Django settings for the redisq_django test suite."""

from __future__ import annotations

import os

SECRET_KEY = "redisq-django-tests-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # Serves the console's static files (charts.js, the vendored uPlot) to browser tests.
    "django.contrib.staticfiles",
    "redisq_django",
    # Consumers of the queues only tests/faults/test_faults.py uses (faults, graceful, chaos).
    "tests.faultapp",
    # An Order model publishing model events (tests/publishing/test_transactional.py).
    "tests.shopapp",
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

ROOT_URLCONF = "tests.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

# `runconsumer` subprocesses of the fault tests share a migrated database file
# (REDISQ_TEST_DB); pytest itself keeps the in-memory database.
_TEST_DB = os.environ.get("REDISQ_TEST_DB", ":memory:")
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": _TEST_DB,
        # Several worker processes write the same file at start-up: take the write
        # lock up front and wait for it rather than failing with "database is locked".
        # REDISQ_TEST_SQLITE_DEFAULTS=1 keeps Django's defaults instead (deferred
        # transactions), as a project that did not follow the docs (docs/howto/workers.md) has them.
        "OPTIONS": (
            {"timeout": 30, "transaction_mode": "IMMEDIATE"}
            if _TEST_DB != ":memory:" and not os.environ.get("REDISQ_TEST_SQLITE_DEFAULTS")
            else {}
        ),
    },
    # PostgreSQL, for the tests marked django_db(databases=[..., "pg"]) only: when such a
    # test is selected, tests/conftest.py starts a private cluster and fills in HOST and
    # PORT (tests/support/postgres_server.py). Until then HOST is a path where no server
    # listens, so nothing reaches a PostgreSQL by accident.
    "pg": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "redisq",
        "USER": "postgres",
        "HOST": "/nonexistent/redisq-test-postgres-not-started",
        "PORT": "",
        "TEST": {"NAME": "redisq_test"},
    },
}

USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "/static/"

# Tests point this at their own redis-server via the `redisq_settings` fixture;
# 6379 is never used by the suite.
REDISQ = {
    "URL": os.environ.get("REDISQ_TEST_URL", "redis://127.0.0.1:6379/0"),
    # Worker processes of the history fault test record lifecycle events.
    "HISTORY": os.environ.get("REDISQ_TEST_HISTORY") == "1",
    # The /redisq/metrics view's bearer token (tests/metrics/test_endpoints.py).
    "METRICS_TOKEN": os.environ.get("REDISQ_TEST_METRICS_TOKEN"),
    # Worker processes of the cluster chaos test: a Redis Cluster, partitioned queues
    # ("queue=K,queue=K").
    "CLUSTER": os.environ.get("REDISQ_TEST_CLUSTER") == "1",
    "PARTITIONS": {
        name: int(k)
        for name, _, k in (
            item.partition("=")
            for item in os.environ.get("REDISQ_TEST_PARTITIONS", "").split(",")
            if item
        )
    },
}
