"""The admin: queues and consumers with live stats, pause/resume and overrides; dead
letters with filters, search and Retry; a live overview of every queue.

Every mutation is POST-only, CSRF-protected, permission-checked and reported through
``messages``.
"""

from redisq_django.admin import deadletters, queues

__all__ = ["deadletters", "queues"]
