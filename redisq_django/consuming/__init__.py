"""Consuming from Django: ``@consumer`` declarations, their rows, and the database
hygiene of a worker (the worker itself is built by :mod:`redisq_django.runner`)."""
