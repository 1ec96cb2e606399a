"""Settings of the redisq example project: an orders shop on SQLite and a local Redis."""

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "redisq_django",
    "shop",
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

ROOT_URLCONF = "example_project.urls"

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

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("EXAMPLE_DB", str(BASE_DIR / "db.sqlite3")),
    }
}

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The Redis the site already uses as its cache is also the message broker: the demo's own
# (`make demo` starts it and writes its URL to .demo/env). No default: a terminal that
# forgot the env file must not publish to, or flush, whatever Redis listens on 6379.
REDIS_URL = os.environ.get("REDISQ_URL", "")
if not REDIS_URL:
    raise ImproperlyConfigured(
        "REDISQ_URL is not set, so the example project does not know which Redis to use "
        "(it never guesses: redis://127.0.0.1:6379 may be someone else's). Run `make demo` "
        "once, then `source example_project/.demo/env` in this terminal (it sets "
        "REDISQ_URL to the demo's Redis, and the demo's database and archive), and run "
        "manage.py again."
    )
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
    }
}
# Django Tasks (Django >= 6.0): the @task functions of shop/tasks.py run through redisq
# queues, by `manage.py runconsumer --tasks`; results are kept in Redis for a day.
TASKS = {
    "default": {
        "BACKEND": "redisq_django.tasks.RedisqBackend",
        "QUEUES": ["default"],
    }
}

REDISQ = {
    "CONNECTION": "default",  # reuse the django-redis client of CACHES["default"]
    "MAX_RETRIES": 3,
    "BACKOFF": 0.2,
    # Record what each consumer does, and archive it to Parquet with
    # `manage.py redisq_pipeline archive` (the pipeline extra; Spark needs Java 17+).
    "HISTORY": True,
    "ARCHIVE_ROOT": os.environ.get("EXAMPLE_ARCHIVE", str(BASE_DIR / "archive")),
    # The ledger's postings spread over 4 partitions by their key (the customer), each
    # partition a queue of its own (on a Redis Cluster, on the master of its slot).
    "PARTITIONS": {"ledger": 4},
}
