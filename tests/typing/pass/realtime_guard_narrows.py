"""supports_realtime is a TypeIs guard for instances and classes; the marker's declared forms."""

from __future__ import annotations

from typing import Literal

from support.typing_examples import DeclaredMarker, InheritedMarker
from typing_extensions import assert_type

from rtmm_protocol import MultiModalModel, SupportsRealtime, supports_realtime
from rtmm_protocol.testing import ToyRealtimeModel, ToyReplaceModel

declared: SupportsRealtime = DeclaredMarker()
inherited: SupportsRealtime = InheritedMarker()
toy: SupportsRealtime = ToyRealtimeModel(hidden_size=8)
toy_class: type[SupportsRealtime] = ToyRealtimeModel


def narrow_instance(model: MultiModalModel) -> None:
    if supports_realtime(model):
        assert_type(model.supports_realtime, Literal[True])
    else:
        assert_type(model, MultiModalModel)


def narrow_optional(model: ToyReplaceModel | ToyRealtimeModel | None) -> None:
    if supports_realtime(model):
        assert_type(model, ToyRealtimeModel)
    else:
        assert_type(model, ToyReplaceModel | None)


def narrow_object(obj: object) -> None:
    if supports_realtime(obj):
        assert_type(obj, SupportsRealtime)


def narrow_class(cls: type[object]) -> None:
    if supports_realtime(cls):
        assert_type(cls, type[SupportsRealtime])
        assert_type(cls.supports_realtime, Literal[True])


def narrow_model_class(cls: type[ToyReplaceModel] | type[ToyRealtimeModel]) -> None:
    if supports_realtime(cls):
        assert_type(cls, type[ToyRealtimeModel])
    else:
        assert_type(cls, type[ToyReplaceModel])
