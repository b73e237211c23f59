"""An encoder cache and a model log that record what a target touches.

Behavioural clauses are observable only through what a target touches: G2 (a skipped
request's outputs are not read), D3 (a dummy run neither encodes nor touches the cache)
and R1 (nothing is encoded twice). The cache's two dicts record every key read or
written, and every encoder call of the toy model is logged, so the checks can ask.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch

from rtmm_protocol.encoder_cache import EncoderCache
from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.testing import comparisons

__all__ = [
    "EVERY_KEY",
    "EncoderCallLog",
    "InstrumentedEncoderCache",
    "RecordingDict",
    "attach_encoder_log",
]

_K = TypeVar("_K")
_V = TypeVar("_V")

#: Recorded for whole-dict accesses (iteration, ``keys()``, ``items()``...), which expose
#: every entry at once.
EVERY_KEY = "<every key>"


class RecordingDict(dict[_K, _V]):
    """A dict that notes which keys are read and written while :attr:`recording` is on.

    The suite switches recording off (:meth:`paused`) while it fills the cache or reads it
    for the oracle, so that only the target's accesses count.
    """

    def __init__(self) -> None:
        super().__init__()
        self.recording = True
        self.reads: set[object] = set()
        self.writes: set[object] = set()

    def forget(self) -> None:
        """Clear what was recorded so far."""
        self.reads.clear()
        self.writes.clear()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Do not record accesses inside the ``with`` block."""
        previous, self.recording = self.recording, False
        try:
            yield
        finally:
            self.recording = previous

    def _read(self, key: object) -> None:
        if self.recording:
            self.reads.add(key)

    def _write(self, key: object) -> None:
        if self.recording:
            self.writes.add(key)

    def __getitem__(self, key: _K) -> _V:
        self._read(key)
        return super().__getitem__(key)

    def get(self, key: _K, default: Any = None) -> Any:
        self._read(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self._read(key)
        return super().__contains__(key)

    def __iter__(self) -> Iterator[_K]:
        self._read(EVERY_KEY)
        return super().__iter__()

    def keys(self) -> Any:
        self._read(EVERY_KEY)
        return super().keys()

    def values(self) -> Any:
        self._read(EVERY_KEY)
        return super().values()

    def items(self) -> Any:
        self._read(EVERY_KEY)
        return super().items()

    def copy(self) -> dict[_K, _V]:
        self._read(EVERY_KEY)
        return dict(dict.items(self))

    def __setitem__(self, key: _K, value: _V) -> None:
        self._write(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: _K) -> None:
        self._write(key)
        super().__delitem__(key)

    def pop(self, key: _K, *default: Any) -> Any:
        self._write(key)
        return super().pop(key, *default)

    def setdefault(self, key: _K, default: Any = None) -> Any:
        self._write(key)
        return super().setdefault(key, default)

    def popitem(self) -> tuple[_K, _V]:
        self._write(EVERY_KEY)
        return super().popitem()

    def clear(self) -> None:
        self._write(EVERY_KEY)
        super().clear()

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._write(EVERY_KEY)
        super().update(*args, **kwargs)


class InstrumentedEncoderCache(EncoderCache):
    """An :class:`~rtmm_protocol.EncoderCache` whose dicts record the target's accesses."""

    # ``mm_features`` and ``encoder_outputs`` keep the contract's declared dict types (a
    # narrower mutable attribute would not be a sound override); the recording view of
    # each is the property below.

    def __init__(self, hidden_size: int | None = None) -> None:
        super().__init__(hidden_size)
        self.mm_features = RecordingDict()
        self.encoder_outputs = RecordingDict()

    @property
    def recording_features(self) -> RecordingDict[str, list[MultiModalFeature]]:
        """``mm_features``, as the recording dict this cache installed."""
        return _recording(self.mm_features, "mm_features")

    @property
    def recording_outputs(self) -> RecordingDict[str, torch.Tensor]:
        """``encoder_outputs``, as the recording dict this cache installed."""
        return _recording(self.encoder_outputs, "encoder_outputs")

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Do not record the accesses made inside the block (the suite's own)."""
        with self.recording_features.paused(), self.recording_outputs.paused():
            yield

    def forget(self) -> None:
        """Clear both dicts' records."""
        self.recording_features.forget()
        self.recording_outputs.forget()

    @property
    def touched(self) -> bool:
        """Whether anything was read or written since the last :meth:`forget`."""
        dicts = (self.recording_features, self.recording_outputs)
        return any(d.reads or d.writes for d in dicts)

    def output_reads(self) -> set[object]:
        """Keys of ``encoder_outputs`` read since the last :meth:`forget`."""
        return set(self.recording_outputs.reads)


def _recording(value: dict[_K, _V], field: str) -> RecordingDict[_K, _V]:
    """``value`` as a recording dict; a target that replaced the cache's dict gets an error."""
    if not isinstance(value, RecordingDict):
        raise TypeError(
            f"EncoderCache.{field} is a {type(value).__name__}, not the recording dict the "
            "suite installed: the target replaced the whole dict instead of changing its entries"
        )
    return value


class EncoderCallLog:
    """Every encoder call of a model: the input tensors each call received."""

    def __init__(self) -> None:
        self.calls: list[list[torch.Tensor]] = []

    def record(self, kwargs: dict[str, object]) -> None:
        """Note one ``embed_multimodal(**kwargs)`` call."""
        features = kwargs.get("input_features")
        items = list(features) if isinstance(features, (list, tuple)) else [features]
        self.calls.append([t for t in items if isinstance(t, torch.Tensor)])

    def encoded(self, inputs: torch.Tensor) -> int:
        """How many times ``inputs`` (this tensor, or a non-empty one equal to it) was encoded."""
        return sum(
            1
            for call in self.calls
            for tensor in call
            if tensor is inputs
            or (
                inputs.numel() > 0
                and tensor.shape == inputs.shape
                and tensor.device == inputs.device
                and bool(comparisons.equal(tensor, inputs))
            )
        )


def attach_encoder_log(model: object) -> EncoderCallLog:
    """Record every ``embed_multimodal`` call of ``model`` (a model without one logs nothing).

    The method is wrapped on the instance, so the model's class, and with it its realtime
    marker, stays what it is.
    """
    log = EncoderCallLog()
    encode = getattr(model, "embed_multimodal", None)
    if callable(encode):

        def recording(**kwargs: object) -> object:
            log.record(kwargs)
            return encode(**kwargs)

        object.__setattr__(model, "embed_multimodal", recording)
    return log
