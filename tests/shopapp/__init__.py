"""A shop app whose ``Order`` publishes model events (tests/django/test_transactional.py)."""
