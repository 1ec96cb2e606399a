"""A shop app whose ``Order`` publishes model events (tests/publishing/test_transactional.py)."""
