"""The Django app of our row of the peer benchmark: its consumer is the shared job."""
