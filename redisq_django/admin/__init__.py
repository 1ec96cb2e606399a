"""The admin: queues and consumers with live stats, pause/resume and overrides; dead
letters with filters, search and Retry; a live overview of every queue; periodic
schedules.

Every mutation is POST-only, CSRF-protected, permission-checked, reported through
``messages`` and recorded in the admin history (``LogEntry``).
"""

import django

from redisq_django.admin import consumers, deadletters, overview, queues, schedules

__all__ = ["consumers", "deadletters", "overview", "queues", "schedules"]

if django.VERSION >= (6, 0):  # the results of Django tasks (django.tasks)
    from redisq_django.admin import task_results

    __all__ += ["task_results"]
