"""Causes over a corpus of real error texts (tests/deadletters/error_corpus.py): the
variants of one error (addresses, ports, host names, ids, durations…) have one key, two
different errors never share one, and N errors sunk from Redis are N causes."""

from __future__ import annotations

from typing import Any

import pytest

from redisq_django import deadletters
from redisq_django.connection import get_broker
from redisq_django.core import error_key
from redisq_django.core.dead_entry import ERROR_KEY_LENGTH, Failure, normalise_error
from redisq_django.deadletters.breakdown import SAMPLE_CHARS
from redisq_django.models import DeadLetter
from tests.deadletters.error_corpus import CORPUS, ErrorGroup
from tests.support.console_data import kill


@pytest.mark.parametrize("group", CORPUS, ids=[g.name for g in CORPUS])
def test_the_variants_of_one_error_have_its_one_key(group: ErrorGroup) -> None:
    assert {normalise_error(text) for text in group.variants} == {group.key}


def test_no_two_errors_of_the_corpus_share_a_key() -> None:
    owners: dict[str, list[str]] = {}
    for group in CORPUS:
        for text in group.variants:
            owners.setdefault(normalise_error(text), []).append(group.name)
    assert {key: sorted(set(names)) for key, names in owners.items() if len(set(names)) > 1} == {}
    assert len(owners) == len(CORPUS)


def test_every_key_fits_its_column_and_keeps_the_cause_of_a_wrapped_error() -> None:
    keys = [normalise_error(text) for group in CORPUS for text in group.variants]
    assert max(len(key) for key in keys) <= ERROR_KEY_LENGTH
    # requests names the root cause last, past the length a key keeps: start and end kept
    (refused,) = [g for g in CORPUS if g.name == "partner refused"]
    assert len(" ".join(refused.variants[0].split())) > ERROR_KEY_LENGTH
    assert refused.key.startswith("HTTPSConnectionPool(host=<str>, port=<port>)")
    assert refused.key.endswith("[Errno 111] Connection refused'))")


@pytest.mark.django_db
def test_n_errors_sunk_from_redis_are_n_causes(redisq_settings: Any, queue_name: str) -> None:
    # Given every variant of every error of the corpus, dead in Redis
    broker = get_broker()
    broker.consumers.ensure(queue_name, "shop")
    texts = [(g, text) for g in CORPUS for text in g.variants]
    for i, (group, text) in enumerate(texts):
        kill(broker, queue_name, "shop", {"i": i}, Failure(group.error_class, text))

    # When the sink moves them into rows and the breakdown counts the causes
    assert deadletters.sink(queue_name, "shop") == len(texts)
    found, total = deadletters.causes(DeadLetter.objects.filter(queue=queue_name))

    # Then each error is exactly one cause, with all its variants
    assert total == len(CORPUS)
    assert sorted((c.error_class, c.error_key, c.count) for c in found) == sorted(
        (g.error_class, g.key, len(g.variants)) for g in CORPUS
    )
    # And each shows one of its own messages as its sample
    samples = {c.error_key: c.sample for c in found}
    assert [
        g.name for g in CORPUS if samples[g.key] not in {v[:SAMPLE_CHARS] for v in g.variants}
    ] == []


#: Inputs built to make a backtracking pattern take its worst path: long runs of what
#: addresses, host names, numbers, quotes and codes are made of, never finished.
HOSTILE = {
    "digits": "1" * 100_000,
    "dotted digits": "1." * 50_000,
    "colons": "1:" * 50_000,
    "hex groups": "ffff:" * 20_000,
    "double colons": "::" * 50_000,
    "labels": "a." * 50_000,
    "hyphens": "a-" * 50_000,
    "letters and digits": "a1" * 50_000,
    "open quote": "'" + "x" * 100_000,
    "quotes": "' " * 50_000,
    "double quotes": '"a' * 50_000,
    "curly quotes": "“" * 100_000,
    "at signs": "a@" * 50_000,
    "brackets": "[" * 100_000,
    "reprs": "<a" * 50_000,
    "query": "?a=&" * 25_000,
    "tuples": "(1, " * 25_000,
    "key values": ")=(" * 33_000,
    "failing rows": "Failing row contains (" * 5_000,
    "uuid starts": "aaaaaaaa-" * 11_000,
    "errors": "Error " * 20_000,
    "durations": "1.1" * 33_000,
    "timeouts": "timeout=" * 12_500,
    "addresses": "db-3.internal:1 [::1]:2 'a b' 0x1 x=1 " * 2_500,
}


@pytest.mark.parametrize("shape", sorted(HOSTILE))
def test_a_hostile_100_kb_message_is_normalised(shape: str, monkeypatch: Any) -> None:
    # Within the bounded window (what the sink does)...
    assert len(normalise_error(HOSTILE[shape])) <= ERROR_KEY_LENGTH
    # ...and over the whole 100 KB: every pattern is linear, none backtracks its way
    # into minutes (the test's timeout would say so).
    monkeypatch.setattr(error_key, "WINDOW", len(HOSTILE[shape]))
    assert len(normalise_error(HOSTILE[shape])) <= ERROR_KEY_LENGTH
