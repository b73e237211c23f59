"""A dict that records every key read or written, to observe what a gather touches."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

__all__ = ["RecordingDict"]

_K = TypeVar("_K")
_V = TypeVar("_V")


class RecordingDict(dict[_K, _V]):
    """A ``dict`` whose lookups land in :attr:`reads` and whose changes land in :attr:`writes`.

    Whole-dict reads (iteration, ``keys``, ``values``, ``items``, ``copy``) are recorded as
    the key ``ALL``, since they expose every entry; ``len`` exposes none and is not recorded.
    """

    ALL = object()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads: list[object] = []
        self.writes: list[object] = []

    def reset(self) -> None:
        """Forget what was recorded so far."""
        self.reads.clear()
        self.writes.clear()

    @property
    def touched(self) -> bool:
        """Whether anything was read or written since the last reset."""
        return bool(self.reads or self.writes)

    # reads
    def __getitem__(self, key: _K) -> _V:
        self.reads.append(key)
        return super().__getitem__(key)

    def get(self, key: _K, default: Any = None) -> Any:
        self.reads.append(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.reads.append(key)
        return super().__contains__(key)

    def __iter__(self) -> Iterator[_K]:
        self.reads.append(self.ALL)
        return super().__iter__()

    def copy(self) -> dict[_K, _V]:
        self.reads.append(self.ALL)
        return dict(super().items())

    def keys(self) -> Any:
        self.reads.append(self.ALL)
        return super().keys()

    def values(self) -> Any:
        self.reads.append(self.ALL)
        return super().values()

    def items(self) -> Any:
        self.reads.append(self.ALL)
        return super().items()

    # writes
    def __setitem__(self, key: _K, value: _V) -> None:
        self.writes.append(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: _K) -> None:
        self.writes.append(key)
        super().__delitem__(key)

    def setdefault(self, key: _K, default: Any = None) -> Any:
        self.writes.append(key)
        return super().setdefault(key, default)

    def pop(self, key: _K, *default: Any) -> Any:
        self.writes.append(key)
        return super().pop(key, *default)

    def popitem(self) -> tuple[_K, _V]:
        self.writes.append(self.ALL)
        return super().popitem()

    def clear(self) -> None:
        self.writes.append(self.ALL)
        super().clear()

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.writes.append(self.ALL)
        super().update(*args, **kwargs)
