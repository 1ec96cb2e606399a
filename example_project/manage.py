#!/usr/bin/env python
"""Django's command-line utility for the redisq example project."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        if os.environ.get("REDISQ_URL"):
            raise
        # The settings refuse to guess a Redis: say how to get the demo's, no traceback.
        sys.exit(f"manage.py: {exc}")
