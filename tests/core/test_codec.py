"""The envelope (``core/envelope.py``) and JSON (``core/json.py``): encoding, errors, decoding."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import time
import uuid
from typing import Any

import pytest
import redis
from django.core.serializers.json import DjangoJSONEncoder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redisq_django.core import envelope as codec
from redisq_django.core.broker import Broker
from redisq_django.core.errors import PayloadNotSerializable, PayloadTooLarge
from redisq_django.core.json import JsonCodec, PayloadEncoder

UTC = dt.UTC
PLUS_2 = dt.timezone(dt.timedelta(hours=2))
MINUS_5_30 = dt.timezone(-dt.timedelta(hours=5, minutes=30))

# -- the same JSON as Django's DjangoJSONEncoder ------------------------------------------

DJANGO_COMPARABLE = [
    dt.datetime(2024, 5, 6, 7, 8, 9, 123_456, tzinfo=UTC),
    dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC),
    dt.datetime(2024, 5, 6, 7, 8, 9, 1, tzinfo=UTC),
    dt.datetime(2024, 5, 6, 7, 8, 9, 999_999, tzinfo=PLUS_2),
    dt.datetime(2024, 5, 6, 7, 8, 9, 500_000, tzinfo=MINUS_5_30),
    dt.datetime(2024, 5, 6, 7, 8, 9, 123_456),  # naive
    dt.datetime(2024, 5, 6, 7, 8, 9),
    dt.datetime(1, 1, 1, tzinfo=UTC),
    dt.date(2024, 2, 29),
    dt.date(1, 1, 1),
    dt.time(7, 8, 9),
    dt.time(7, 8, 9, 123_456),
    dt.time(0, 0, 0, 1),
    dt.timedelta(0),
    dt.timedelta(days=1, hours=2, minutes=3, seconds=4, microseconds=5),
    dt.timedelta(seconds=59.5),
    dt.timedelta(days=400),
    dt.timedelta(microseconds=-1),
    dt.timedelta(days=-1),
    dt.timedelta(days=-1, seconds=1),
    dt.timedelta(hours=-25, microseconds=-7),
    dt.timedelta.max,
    dt.timedelta.min,
    decimal.Decimal("1.10"),
    decimal.Decimal("-0.000001"),
    decimal.Decimal("1E+3"),
    decimal.Decimal("12345678901234567890.123456789"),
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    {"nested": [dt.date(2020, 1, 1), decimal.Decimal("2.50"), {"t": dt.time(1, 2)}]},
]


@pytest.mark.parametrize("value", DJANGO_COMPARABLE, ids=repr)
def test_payload_encoder_matches_django(value: Any) -> None:
    ours = json.dumps(value, cls=PayloadEncoder)
    django = json.dumps(value, cls=DjangoJSONEncoder)
    assert ours == django


def test_exact_encodings() -> None:
    c = JsonCodec(PayloadEncoder)
    value = [
        dt.datetime(2024, 5, 6, 7, 8, 9, 123_456, tzinfo=UTC),
        dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=PLUS_2),
        dt.time(7, 8, 9, 123_456),
        dt.timedelta(hours=-25, microseconds=-7),
        decimal.Decimal("1.10"),
        uuid.UUID(int=1),
        "é",
    ]
    assert c.dumps(value, queue="q") == (
        b'["2024-05-06T07:08:09.123Z","2024-05-06T07:08:09+02:00","07:08:09.123",'
        b'"-P1DT01H00M00.000007S","1.10","00000000-0000-0000-0000-000000000001",' + '"é"]'.encode()
    )


@given(
    st.one_of(
        st.datetimes(timezones=st.none() | st.just(UTC) | st.timezones()),
        st.dates(),
        st.times(),
        st.timedeltas(),
        st.decimals(allow_nan=False, allow_infinity=False),
        st.uuids(),
    )
)
@settings(max_examples=200, deadline=None)
def test_payload_encoder_matches_django_fuzzed(value: Any) -> None:
    assert json.dumps(value, cls=PayloadEncoder) == json.dumps(value, cls=DjangoJSONEncoder)


# -- what JSON cannot represent ----------------------------------------------------------


class Gadget:
    pass


@pytest.mark.parametrize(
    ("payload", "type_name"),
    [
        (object(), "object"),
        ({1, 2}, "set"),
        ({"deep": [1, {"x": Gadget()}]}, "Gadget"),
        (b"bytes", "bytes"),
        (frozenset(), "frozenset"),
    ],
)
def test_non_serialisable_payload_names_the_type(payload: Any, type_name: str) -> None:
    c = JsonCodec(PayloadEncoder)
    with pytest.raises(PayloadNotSerializable) as info:
        c.encode_payload(payload, queue="orders", limit=10_000)
    assert info.value.type_name == type_name
    assert info.value.queue == "orders"
    assert f"of type {type_name!r}" in str(info.value)
    assert "payload for queue 'orders'" in str(info.value)


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_infinity_are_rejected(number: float) -> None:
    with pytest.raises(PayloadNotSerializable, match="value rejected by JSON"):
        JsonCodec(PayloadEncoder).dumps({"x": [number]}, queue="q")


def test_aware_time_is_rejected() -> None:
    with pytest.raises(PayloadNotSerializable, match="aware time"):
        JsonCodec(PayloadEncoder).dumps(dt.time(1, 2, tzinfo=UTC), queue="q")


def test_lone_surrogate_is_rejected() -> None:
    with pytest.raises(PayloadNotSerializable, match="lone surrogate"):
        JsonCodec(PayloadEncoder).dumps("\ud800", queue="q")


def test_absurdly_deep_nesting_is_rejected() -> None:
    value: list[Any] = []
    for _ in range(100_000):
        value = [value]
    with pytest.raises(PayloadNotSerializable, match="nested too deeply"):
        JsonCodec(PayloadEncoder).dumps(value, queue="q")


def test_bad_headers_name_the_headers() -> None:
    c = JsonCodec(PayloadEncoder)
    assert c.encode_headers(None, queue="q") is None
    assert c.encode_headers({}, queue="q") is None
    assert c.encode_headers({"k": 1}, queue="q") == b'{"k":1}'
    with pytest.raises(PayloadNotSerializable, match="The headers for queue 'q'") as info:
        c.encode_headers({"k": {1, 2}}, queue="q")
    assert info.value.type_name == "set"
    with pytest.raises(PayloadNotSerializable, match="of type 'list'"):
        c.encode_headers([("k", 1)], queue="q")  # type: ignore[arg-type]


def test_payload_over_the_limit() -> None:
    c = JsonCodec(PayloadEncoder)
    # Given a payload whose encoding is 22 bytes ("x" * 20 plus two quotes)
    payload = "x" * 20
    # When the limit is exactly its size, it passes
    assert c.encode_payload(payload, queue="q", limit=22) == b'"' + b"x" * 20 + b'"'
    # When it is one byte less, it is refused with both numbers
    with pytest.raises(PayloadTooLarge) as info:
        c.encode_payload(payload, queue="big", limit=21)
    assert (info.value.size, info.value.limit, info.value.queue) == (22, 21, "big")
    assert "is 22 bytes" in str(info.value)
    assert "limit of 21 bytes" in str(info.value)


def test_size_counts_utf8_bytes() -> None:
    with pytest.raises(PayloadTooLarge) as info:
        JsonCodec(PayloadEncoder).encode_payload("é" * 10, queue="q", limit=20)
    assert info.value.size == 22


# -- decoding: any entry decodes or is reported undecodable --------------------------------

entry_ids = st.builds(
    lambda ms, seq: f"{ms}-{seq}".encode(),
    st.integers(0, 2**48),
    st.integers(0, 2**64 - 1),
)

ENVELOPE_FIELDS = [
    codec.F_VERSION,
    codec.F_PAYLOAD,
    codec.F_HEADERS,
    codec.F_ID,
    codec.F_PUBLISHED_AT,
    codec.F_ATTEMPTS,
    codec.F_FIRST_FAILED_AT,
    codec.F_DUE_AT,
    codec.F_FAILURES,
    codec.F_KEY,
]

json_texts = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=10,
).map(lambda v: json.dumps(v).encode())

field_values = st.one_of(
    st.binary(max_size=30),
    st.integers(-(2**70), 2**70).map(lambda i: str(i).encode()),
    st.sampled_from([b"1", b"0", b"", b"-1", b" 7 ", b"1_0", b"\xff", b"null", b"{}", b"[]"]),
    json_texts,
)


def _decode_or_undecodable(entry_id: bytes, fields: dict[bytes, bytes]) -> None:
    try:
        result = codec.decode(entry_id, fields)._asdict()
    except codec.UndecodableEntry as exc:
        assert str(exc)
        return
    assert set(result) == {
        "id",
        "payload",
        "headers",
        "attempts",
        "published_at_ms",
        "first_failed_at_ms",
        "due_at_ms",
        "failures",
        "key",
    }
    assert result["key"] is None or 0 < len(result["key"].encode()) <= codec.MAX_KEY_BYTES
    assert isinstance(result["headers"], dict)
    assert isinstance(result["id"], str)
    assert isinstance(result["attempts"], int)
    assert result["attempts"] >= 0


@given(entry_ids, st.dictionaries(st.binary(max_size=12), st.binary(max_size=40), max_size=6))
@settings(max_examples=200, deadline=None)
def test_decode_arbitrary_fields(entry_id: bytes, fields: dict[bytes, bytes]) -> None:
    _decode_or_undecodable(entry_id, fields)


@given(
    entry_ids,
    st.dictionaries(st.sampled_from(ENVELOPE_FIELDS), field_values, max_size=8),
    st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_decode_envelope_like_fields(
    entry_id: bytes, fields: dict[bytes, bytes], with_payload: bool
) -> None:
    if with_payload:
        fields.setdefault(codec.F_PAYLOAD, b'{"a":1}')
    _decode_or_undecodable(entry_id, fields)


def test_decode_minimal_entry_from_any_client() -> None:
    assert codec.decode(b"1700000000123-4", {b"payload": b'{"a":1}'})._asdict() == {
        "id": "1700000000123-4",
        "payload": {"a": 1},
        "headers": {},
        "attempts": 0,
        "published_at_ms": 1700000000123,
        "first_failed_at_ms": None,
        "due_at_ms": None,
        "failures": 0,
        "key": None,
    }


def test_decode_full_envelope() -> None:
    fields = {
        b"v": b"1",
        b"payload": b"[1,2]",
        b"headers": b'{"h":"x"}',
        b"id": b"abc",
        b"published_at": b"10",
        b"attempts": b"3",
        b"first_failed_at": b"20",
        b"due_at": b"30",
        b"failures": b"2",
        b"key": "order-42 ✓".encode(),
    }
    assert codec.decode(b"99-0", fields)._asdict() == {
        "id": "abc",
        "payload": [1, 2],
        "headers": {"h": "x"},
        "attempts": 3,
        "published_at_ms": 10,
        "first_failed_at_ms": 20,
        "due_at_ms": 30,
        "failures": 2,
        "key": "order-42 ✓",
    }


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({b"v": b"2", b"payload": b"1"}, "unsupported envelope version"),
        ({b"body": b"1"}, "no 'payload' field"),
        ({b"payload": b"{"}, "payload is not valid JSON"),
        ({b"payload": b"\xff"}, "payload is not valid JSON"),
        ({b"payload": b"1", b"headers": b"[1]"}, "headers are not a JSON object"),
        ({b"payload": b"1", b"headers": b"{"}, "headers are not valid JSON"),
        ({b"payload": b"1", b"id": b"\xff"}, "field 'id' is not UTF-8"),
        ({b"payload": b"1", b"attempts": b"x"}, "field 'attempts' is not an integer"),
        ({b"payload": b"1", b"due_at": b"-5"}, "field 'due_at' is not an integer"),
        # A pathological nesting depth must not escape as RecursionError.
        ({b"payload": b"[" * 100_000}, "payload is not valid JSON"),
        ({b"payload": b"1", b"headers": b'{"a":' * 100_000}, "headers are not valid JSON"),
    ],
)
def test_undecodable_entries_say_why(fields: dict[bytes, bytes], reason: str) -> None:
    with pytest.raises(codec.UndecodableEntry, match=reason):
        codec.decode(b"1-0", fields)


# -- round trip through Redis --------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=25,
)


@pytest.fixture
def consumer_g(broker: Broker, queue_name: str) -> None:
    """Consumer ``g`` of the test's queue, registered at its end (``latest``)."""
    broker.consumers.ensure(queue_name, "g", start="latest")


@pytest.mark.usefixtures("consumer_g")
@given(payload=json_values, headers=st.dictionaries(st.text(max_size=8), json_values, max_size=3))
@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_what_publish_writes_decodes_to_an_equal_payload(
    broker: Broker, queue_name: str, payload: Any, headers: dict[str, Any]
) -> None:
    sub = broker.subscribe(queue_name, "g", instance="c")
    # Given a message published with this payload and headers
    message_id = broker.publish(queue_name, payload, headers=headers)
    # When it is fetched
    messages = sub.fetch(count=10, block_ms=0)
    # Then exactly it arrives, with equal payload and headers
    assert [(m.id, m.payload, m.headers) for m in messages] == [(message_id, payload, headers)]
    assert sub.ack(messages) == 1


@pytest.mark.usefixtures("consumer_g")
@given(payload=json_values)
@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_delayed_publish_through_promote_decodes_to_an_equal_payload(
    broker: Broker, queue_name: str, payload: Any
) -> None:
    sub = broker.subscribe(queue_name, "g", instance="c")
    # Given a delayed message (its envelope goes through the Lua JSON codec in promote)
    message_id = broker.publish(queue_name, payload, headers={"k": payload}, delay=0.001)
    time.sleep(0.002)
    # When it is due, promoted and fetched
    sub.promote()
    messages = sub.fetch(count=10, block_ms=0)
    # Then it arrives intact, under its own id
    assert [(m.id, m.payload, m.headers) for m in messages] == [
        (message_id, payload, {"k": payload})
    ]
    assert sub.ack(messages) == 1


@pytest.mark.usefixtures("consumer_g")
def test_a_deeply_nested_entry_becomes_a_listable_dead_letter(
    broker: Broker, queue_name: str, redis_client: redis.Redis
) -> None:
    # Given another client wrote an entry whose payload nests absurdly deep
    deep = b"[" * 100_000
    entry_id = redis_client.xadd(broker.keys(queue_name).log, {"payload": deep})
    sub = broker.subscribe(queue_name, "g", instance="c")
    # When it is fetched
    # Then it is not delivered but dead-lettered as undecodable
    assert sub.fetch(count=10, block_ms=0) == []
    [dead] = broker.dead_letters.read(queue_name, "g")
    assert (dead.id, dead.reason, dead.payload) == (entry_id.decode(), "undecodable", deep.decode())
    assert "payload is not valid JSON" in dead.error_message
