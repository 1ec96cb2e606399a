"""The admin, an operations console: queues and consumers with states and live figures
(read through :mod:`~redisq_django.admin.live`, so pages stay up when Redis is sick;
live pages of each consumer and queue there too),
pause/resume and validated overrides; dead letters with filters, search, groups by
error and retry/discard of everything matching a filter (:mod:`.triage`); a live
overview of every queue; Django task results; periodic schedules; the inbox of
``atomic=True`` consumers (read-only).

Every mutation is POST-only, CSRF-protected, permission-checked, reported through
``messages`` and recorded in the admin history (``LogEntry``).
"""

import django

from redisq_django.admin import consumers, deadletters, inbox, overview, queues, schedules

__all__ = ["consumers", "deadletters", "inbox", "overview", "queues", "schedules"]

if django.VERSION >= (6, 0):  # the results of Django tasks (django.tasks)
    from redisq_django.admin import task_results

    __all__ += ["task_results"]
