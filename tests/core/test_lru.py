"""The one LRU cache class (rewriter/lru.py): bounded, least recently used dropped first,
reads refresh recency, and safe when shared by threads."""

from __future__ import annotations

import threading

import pytest

from rewriter.lru import LRU


def test_the_least_recently_used_entry_is_dropped_first():
    cache = LRU(2)
    assert cache.put("a", 1) == [] and cache.put("b", 2) == []
    assert cache.get("a") == 1  # "a" is now more recent than "b"
    assert cache.put("c", 3) == [("b", 2)]
    assert len(cache) == 2 and "b" not in cache and cache.get("b") is None
    assert cache.values() == [1, 3]


def test_a_membership_test_does_not_refresh_an_entry():
    cache = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert "a" in cache
    assert cache.put("c", 3) == [("a", 1)]


def test_a_stored_none_is_told_from_a_miss_by_the_default():
    cache = LRU(4)
    cache.put("k", None)
    assert cache.get("k", False) is None and cache.get("missing", False) is False


def test_rewriting_an_entry_refreshes_it_and_never_grows_the_cache():
    cache = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.put("a", 10) == []
    assert cache.put("c", 3) == [("b", 2)] and cache.get("a") == 10


def test_a_cache_holds_at_least_one_entry():
    with pytest.raises(ValueError):
        LRU(0)


def test_threads_sharing_a_cache_keep_it_bounded_and_consistent():
    cache, errors = LRU(64), []

    def work(t: int) -> None:
        try:
            for i in range(5000):
                key = (t * 7 + i) % 200
                cache.put(key, key)
                got = cache.get((key + 1) % 200)
                assert got is None or got == (key + 1) % 200
                assert len(cache) <= 64
        except Exception as e:  # reported below, from the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == [] and len(cache) == 64
    assert all(cache.get(v) == v for v in cache.values())
