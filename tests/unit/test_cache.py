"""The caching primitives: `Lazy` loads once across threads and retries a failed load; `LRUCache` evicts in order."""

from __future__ import annotations

import threading
import time

import pytest

from fastcrag.cache import Lazy, LRUCache


def test_lazy_loads_once_when_two_threads_ask_together() -> None:
    calls: list[int] = []
    started = threading.Barrier(2)

    def load() -> object:
        calls.append(1)
        time.sleep(0.05)  # long enough for the second thread to arrive while the first is loading
        return object()

    lazy = Lazy(load)
    results: list[object] = []

    def ask() -> None:
        started.wait()
        results.append(lazy.get())

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert len(results) == 2 and results[0] is results[1]
    assert lazy.loaded and lazy.get() is results[0]


def test_lazy_retries_a_failed_load() -> None:
    attempts: list[int] = []

    def load() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("model file not there yet")
        return "model"

    lazy = Lazy(load)
    with pytest.raises(OSError, match="not there yet"):
        lazy.get()
    assert not lazy.loaded
    assert lazy.get() == "model"
    assert lazy.get() == "model"
    assert len(attempts) == 2


def test_lazy_caches_none_and_reset_loads_again() -> None:
    calls: list[int] = []

    def load() -> None:
        calls.append(1)

    lazy: Lazy[None] = Lazy(load)
    assert lazy.get() is None and lazy.get() is None
    assert len(calls) == 1
    lazy.reset()
    assert not lazy.loaded
    lazy.get()
    assert len(calls) == 2


def test_lru_evicts_the_least_recently_used_first() -> None:
    cache: LRUCache[str, int] = LRUCache(3)
    cache.put_many([("a", 1), ("b", 2), ("c", 3)])
    assert cache.get("a") == 1  # "a" is now the most recent: "b" goes first
    cache.put("d", 4)
    assert "b" not in cache
    assert cache.get_many(["a", "c", "d", "b"]) == {"a": 1, "c": 3, "d": 4}
    cache.get_many(["c"])  # recency order now a, d, c
    cache.put_many([("e", 5), ("f", 6)])
    assert [k for k in "acdef" if k in cache] == ["c", "e", "f"]
    assert len(cache) == 3


def test_lru_put_replaces_a_value_and_refreshes_it() -> None:
    cache: LRUCache[str, int] = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    cache.put("c", 3)
    assert cache.get("a") == 10
    assert cache.get("b") is None
    assert cache.get("b", -1) == -1


def test_lru_of_size_zero_keeps_nothing_and_clear_empties() -> None:
    off: LRUCache[str, int] = LRUCache(0)
    off.put("a", 1)
    assert len(off) == 0 and off.get("a") is None
    cache: LRUCache[str, int] = LRUCache(4)
    cache.put_many([("a", 1), ("b", 2)])
    cache.clear()
    assert len(cache) == 0 and cache.get_many(["a", "b"]) == {}


def test_lru_stays_within_maxsize_under_concurrent_writers() -> None:
    cache: LRUCache[tuple[int, int], int] = LRUCache(100)

    def write(worker: int) -> None:
        for i in range(2000):
            cache.put((worker, i), i)
            cache.get_many([(worker, i), (1 - worker, i)])

    threads = [threading.Thread(target=write, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 100
