"""Thread-safe caching primitives: a bounded LRU mapping and a value built on first use."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar, cast

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T")

_UNSET = object()


class LRUCache(Generic[K, V]):
    """A mapping of at most `maxsize` entries that forgets the least recently used first; every call is thread-safe.

    Reading an entry (`get`, `get_many`) or writing it (`put`, `put_many`) makes it the most recently used.
    """

    def __init__(self, maxsize: int) -> None:
        """Create an empty cache.

        Args:
            maxsize: The most entries kept; 0 or less keeps none (every `put` is dropped).
        """
        self.maxsize = maxsize
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    def __contains__(self, key: object) -> bool:
        """Whether `key` is cached (its recency is left as it is)."""
        with self._lock:
            return key in self._data

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value cached for `key`, else `default`."""
        with self._lock:
            if key not in self._data:
                return default
            self._data.move_to_end(key)
            return self._data[key]

    def get_many(self, keys: Iterable[K]) -> dict[K, V]:
        """The cached entries among `keys` (missing keys are left out)."""
        with self._lock:
            hits: dict[K, V] = {}
            for key in keys:
                if key in self._data:
                    self._data.move_to_end(key)
                    hits[key] = self._data[key]
            return hits

    def put(self, key: K, value: V) -> None:
        """Cache `value` under `key`, evicting the least recently used entries beyond `maxsize`."""
        self.put_many([(key, value)])

    def put_many(self, items: Iterable[tuple[K, V]]) -> None:
        """Cache every (key, value) pair in order, then evict beyond `maxsize`."""
        if self.maxsize <= 0:
            return
        with self._lock:
            for key, value in items:
                self._data[key] = value
                self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._data.clear()


class Lazy(Generic[T]):
    """A value built by `loader` on first use, once, even when threads ask for it at the same time.

    A load that raises caches nothing: the exception reaches the caller and the next `get` tries again.
    """

    def __init__(self, loader: Callable[[], T]) -> None:
        """Hold `loader`; nothing is built yet."""
        self._loader = loader
        self._value: object = _UNSET
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        """Whether the value has been built."""
        return self._value is not _UNSET

    def get(self) -> T:
        """The value, built by the loader on the first call (the others wait for it)."""
        value = self._value
        if value is _UNSET:
            with self._lock:
                value = self._value
                if value is _UNSET:
                    value = self._value = self._loader()
        return cast(T, value)

    def reset(self) -> None:
        """Forget the value; the next `get` builds it again."""
        with self._lock:
            self._value = _UNSET
