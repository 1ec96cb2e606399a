"""Signals redisq sends (Signal objects only; receivers live in ``signal_handlers.py``).

``dead_letters_retried`` and ``dead_letters_discarded`` are sent once per retry or discard
of up to 500 rows (from the admin, the operator command or
:mod:`redisq_django.deadletters`; a bulk action sends one per chunk) with
``sender=DeadLetter``, ``rows`` (the rows changed, already updated) and ``user`` (who did
it, or None from the shell): connect an audit trail or a notification to them.
"""

from django.dispatch import Signal

dead_letters_retried = Signal()
dead_letters_discarded = Signal()
