"""The pipeline reads an envelope's integers by the wire's rule (PROTOCOL.md, *Integers*):
what the archive shows for a message is what its consumers decoded."""

from __future__ import annotations

import pytest

from redisq_django.pipeline import columns
from redisq_django.pipeline.redis_io import StreamRef

pytestmark = pytest.mark.spark  # the schemas come from PySpark (no session needed)

ENTRY_MS = 1_700_000_000_000


@pytest.mark.parametrize(
    ("text", "expected"),
    [(b"5", 5), (b"05", 5), (b"+5", None), (b" 5", None), (b"5e0", None), (b"0x5", None),
     (b"-5", None), (b"5_0", None), (b"", None), (b"1234567890123456", None)],
)  # fmt: skip
def test_message_integers_follow_the_wire_rule(text: bytes, expected: int | None) -> None:
    # Given a log entry whose attempts and publish time are this text
    page = [
        (f"{ENTRY_MS}-0".encode(), [b"payload", b"1", b"attempts", text, b"published_at", text])
    ]
    # When the data source turns it into a row
    row = columns.messages(StreamRef("q", "redisq:{q}:log"), page).to_pylist()[0]
    # Then a valid integer is read as such; any other text is no value (the publish time
    # falls back to the entry id's, as a consumer's decoder would not get that far)
    assert row["attempts"] == expected
    published_ms = int(row["published_at"].timestamp() * 1000)
    assert published_ms == (ENTRY_MS if expected is None else expected)
