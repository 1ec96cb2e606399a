"""Settings of a project whose ``REDISQ`` names no Redis redisq can use, as a new user's
first try often does. tests/management/test_no_redis_configured.py runs our commands
with them, in processes of their own; ``REDISQ_TEST_NO_REDIS`` says which mistake:

* ``zero``: no ``REDISQ`` and no ``CACHES`` at all (Django's default cache, a
  ``LocMemCache``, is what ``CONNECTION``'s default ``"default"`` names);
* ``missing``: ``REDISQ["CONNECTION"]`` names a cache ``CACHES`` does not have;
* ``locmem``: it names a cache that is not django-redis.
"""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403

_CASE = os.environ.get("REDISQ_TEST_NO_REDIS", "zero")
if _CASE == "zero":
    del REDISQ  # noqa: F821  (from tests.settings)
elif _CASE == "missing":
    REDISQ = {"CONNECTION": "queues"}
elif _CASE == "locmem":
    REDISQ = {"CONNECTION": "queues"}
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "queues": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    }
else:
    raise ValueError(f"REDISQ_TEST_NO_REDIS={_CASE!r}: zero, missing or locmem")
