"""The per-request feature lists and the cached encoder outputs a gather reads."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import torch

from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.validation import check_encoder_output, check_feature_list

__all__ = ["EncoderCache", "FeatureList", "FeatureListDict", "VersionedDict"]

_K = TypeVar("_K")
_V = TypeVar("_V")
_T = TypeVar("_T")

# Version stamps come from one counter, so two dicts (or one dict replaced by another)
# never show the same stamp for different contents.
_stamps = itertools.count(1)


class VersionedDict(dict[_K, _V]):
    """A ``dict`` whose :attr:`version` changes on every mutation, however it is made.

    It compares, prints, copies and pickles like the plain dict it is (a copy or an
    unpickled one gets a fresh version). Consumers that derive something from the
    contents (the reference planner remembers which output each feature has) can check
    the version instead of reading every entry again; an unchanged version means no
    entry was added, removed or replaced since it was read.
    """

    _version = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self._touch()
        if args or kwargs:
            self.update(*args, **kwargs)

    @property
    def version(self) -> int:
        """A stamp that differs after any mutation of this dict (unique across dicts)."""
        return self._version

    def _touch(self) -> None:
        self._version = next(_stamps)

    def _added(self, value: _V) -> None:
        """Hook: ``value`` was stored."""

    def _removed(self, value: _V) -> None:
        """Hook: ``value`` was dropped or replaced."""

    def __setitem__(self, key: _K, value: _V) -> None:
        old = dict.get(self, key, _ABSENT)
        super().__setitem__(key, value)
        self._touch()
        if old is not _ABSENT:
            self._removed(old)  # type: ignore[arg-type]  # not _ABSENT here
        self._added(value)

    def __delitem__(self, key: _K) -> None:
        value = dict.__getitem__(self, key)
        super().__delitem__(key)
        self._touch()
        self._removed(value)

    def pop(self, key: _K, *default: Any) -> Any:
        """As ``dict.pop``."""
        if key not in self:
            return super().pop(key, *default)
        value = super().pop(key)
        self._touch()
        self._removed(value)
        return value

    def popitem(self) -> tuple[_K, _V]:
        """As ``dict.popitem``."""
        key, value = super().popitem()
        self._touch()
        self._removed(value)
        return key, value

    def clear(self) -> None:
        """As ``dict.clear``."""
        for value in list(self.values()):
            self._removed(value)
        super().clear()
        self._touch()

    def setdefault(self, key: _K, default: Any = None) -> Any:
        """As ``dict.setdefault``."""
        if key not in self:
            self[key] = default
        return dict.__getitem__(self, key)

    def update(self, *args: Any, **kwargs: Any) -> None:
        """As ``dict.update``."""
        merged: dict[Any, Any] = dict(*args, **kwargs)
        for key, value in merged.items():
            self[key] = value
        self._touch()

    def __ior__(self, other: Any) -> VersionedDict[_K, _V]:  # type: ignore[override,misc]
        self.update(other)
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (), None, None, iter(dict(self).items()))

    def copy(self) -> VersionedDict[_K, _V]:
        """A shallow copy of the same type (with its own version)."""
        return type(self)(self)


class _Absent:
    pass


_ABSENT = _Absent()


# The list methods that only add items at the end (a realtime stream growing).
_APPENDING_EDITS = frozenset({"append", "extend", "__iadd__"})
# Every list method that mutates in place.
_LIST_EDITS = (
    "__setitem__",
    "__delitem__",
    "__iadd__",
    "__imul__",
    "append",
    "extend",
    "insert",
    "pop",
    "remove",
    "clear",
    "sort",
    "reverse",
)


class FeatureList(list[_T]):
    """A request's feature ``list`` that tells the :class:`FeatureListDict` holding it of edits.

    Every mutating list operation (item or slice assignment and deletion, ``append``,
    ``extend``, ``insert``, ``pop``, ``remove``, ``clear``, ``sort``, ``reverse``,
    ``+=``, ``*=``) changes the owning dict's :attr:`~VersionedDict.version`. Otherwise
    it is a plain list; copies and pickles start without an owner.
    """

    __slots__ = ("_owner", "rewritten_at")

    def __init__(self, items: Iterable[_T] = ()) -> None:
        super().__init__(items)
        self._owner: FeatureListDict[Any] | None = None
        #: Stamp of the last edit that was not an append (0: none). Consumers that
        #: follow appends incrementally rebuild a list whose stamp moved.
        self.rewritten_at = 0

    def _touch(self) -> None:
        owner = self._owner
        if owner is not None:
            owner._touch()

    def _rewritten(self) -> None:
        self.rewritten_at = stamp = next(_stamps)
        owner = self._owner
        if owner is not None:
            owner.rewrite_stamp = stamp

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (list(self),))


def _reporting(name: str) -> Callable[..., Any]:
    """``list.<name>``, followed by a report to the owning dict even when it raises."""
    edit = getattr(list, name)

    appends_only = name in _APPENDING_EDITS

    def reporting_edit(self: FeatureList[Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return edit(self, *args, **kwargs)
        finally:
            if not appends_only:
                self._rewritten()
            self._touch()

    reporting_edit.__name__ = name
    reporting_edit.__qualname__ = f"FeatureList.{name}"
    reporting_edit.__doc__ = f"As ``list.{name}``; the owning dict's version changes."
    return reporting_edit


for _name in _LIST_EDITS:
    setattr(FeatureList, _name, _reporting(_name))


class FeatureListDict(VersionedDict[str, list[_T]]):
    """The ``mm_features`` dict: versioned, including edits made inside its lists.

    Lists stored as :class:`FeatureList` (as :meth:`EncoderCache.add_request` does)
    report their edits to this dict. A plain list assigned directly is stored as it is
    (the caller may keep editing it), but this dict cannot see its edits: while it holds
    any such list, :attr:`fully_tracked` is ``False`` and consumers must not rely on
    :attr:`~VersionedDict.version` alone. Only edits made through the objects' own
    methods are seen: calling the base class's (``list.append(features, f)``,
    ``dict.__setitem__(d, k, v)``) or C code that writes list items directly (``heapq``)
    goes around the tracking, as it would around any subclass.
    """

    _untracked = 0
    #: Stamp of the last non-append edit of any of its lists (0: none).
    rewrite_stamp = 0

    @property
    def fully_tracked(self) -> bool:
        """Whether every value is a :class:`FeatureList` reporting to this dict."""
        return self._untracked == 0

    def _added(self, value: list[_T]) -> None:
        if isinstance(value, FeatureList):
            if value._owner is None:
                value._owner = self
            if value._owner is self:
                return
        self._untracked += 1

    def _removed(self, value: list[_T]) -> None:
        if not (isinstance(value, FeatureList) and value._owner is self):
            self._untracked -= 1


class EncoderCache:
    """Features per request and encoder outputs per feature identifier.

    ``mm_features`` maps a ``req_id`` to that request's features sorted by offset;
    ``encoder_outputs`` maps a feature identifier to its ``(num_embeds, hidden_size)``
    output. Both are dicts so engines and tests can read and edit them directly; the
    methods below are the checked way to change them (they raise ``ValueError``
    naming the identifier for malformed features, SPEC E2). They are versioned dicts
    (:class:`FeatureListDict`, :class:`VersionedDict`) that note every edit, so a
    gather can skip re-reading entries that did not change since the last step.
    """

    def __init__(self, hidden_size: int | None = None) -> None:
        if hidden_size is not None and hidden_size <= 0:
            raise ValueError(f"EncoderCache.hidden_size must be positive, got {hidden_size}")
        #: When set, outputs stored through :meth:`put_encoder_output` must have this width.
        self.hidden_size = hidden_size
        self.mm_features: dict[str, list[MultiModalFeature]] = FeatureListDict()
        self.encoder_outputs: dict[str, torch.Tensor] = VersionedDict()

    def add_request(self, req_id: str, features: Iterable[MultiModalFeature] = ()) -> None:
        """Register a request and its features (sorted by offset, non-overlapping)."""
        if not isinstance(req_id, str):
            raise ValueError(f"req_id must be a str, got {req_id!r}")
        if req_id in self.mm_features:
            raise ValueError(f"request {req_id!r} is already registered in the encoder cache")
        feature_list = FeatureList(features)
        check_feature_list(req_id, feature_list)
        self.mm_features[req_id] = feature_list

    def append_feature(self, req_id: str, feature: MultiModalFeature) -> None:
        """Add a feature after the request's last one (a realtime stream growing)."""
        features = self._features_of(req_id)
        check_feature_list(req_id, [*features[-1:], feature])
        features.append(feature)

    def remove_request(self, req_id: str) -> None:
        """Forget a request's features; its encoder outputs stay until freed."""
        self._features_of(req_id)
        del self.mm_features[req_id]

    def put_encoder_output(self, identifier: str, output: torch.Tensor) -> None:
        """Cache ``output`` under ``identifier`` after checking its shape against the feature."""
        feature = self.find_feature(identifier)
        if feature is None:
            raise ValueError(
                f"no registered feature has identifier {identifier!r}; add its request first"
            )
        check_encoder_output(feature, output, self.hidden_size)
        self.encoder_outputs[identifier] = self._admit(identifier, output)

    def _admit(self, identifier: str, output: torch.Tensor) -> torch.Tensor:
        """The tensor to cache for a checked ``output``: itself here; subclasses may copy it."""
        return output

    def free_encoder_output(self, identifier: str) -> None:
        """Drop the cached output of ``identifier`` (no error if it is not cached)."""
        self.encoder_outputs.pop(identifier, None)

    def find_feature(self, identifier: str) -> MultiModalFeature | None:
        """Return a registered feature with this identifier, or ``None``."""
        for features in self.mm_features.values():
            for feature in features:
                if feature.identifier == identifier:
                    return feature
        return None

    def _features_of(self, req_id: str) -> list[MultiModalFeature]:
        try:
            return self.mm_features[req_id]
        except KeyError:
            raise ValueError(f"request {req_id!r} is not registered in the encoder cache") from None
