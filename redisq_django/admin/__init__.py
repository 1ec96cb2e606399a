"""The admin, an operations console: queues and consumers with states and live figures
(read through :mod:`~redisq_django.admin.live`, so pages stay up when Redis is sick),
pause/resume and validated overrides; dead letters with filters, search, groups by
error and retry/discard of everything matching a filter (:mod:`.triage`); a live
overview of every queue.

Every mutation is POST-only, CSRF-protected, permission-checked, reported through
``messages`` and recorded in the admin history (``LogEntry``).
"""

from redisq_django.admin import consumers, deadletters, overview, queues

__all__ = ["consumers", "deadletters", "overview", "queues"]
