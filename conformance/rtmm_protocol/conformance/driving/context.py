"""What a factory receives (:class:`ConformanceContext`) and how it refuses a mode.

``FACTORY(ctx)`` builds the object under test around the context's model and encoder
cache, which the suite controls and instruments. A factory that cannot handle a mode
(a state written only for realtime models, say) raises :class:`ModeNotSupported` with
a reason; the checks of that mode are then reported as skipped with that reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from rtmm_protocol.protocols import MultiModalModel, TextModel
from rtmm_protocol.testing.instruments import (
    EncoderCallLog,
    InstrumentedEncoderCache,
    attach_encoder_log,
)
from rtmm_protocol.testing.toy_models import ToyRealtimeModel, ToyReplaceModel, ToyTextModel

__all__ = [
    "MODES",
    "ConformanceContext",
    "ContextParts",
    "Factory",
    "Mode",
    "ModeNotSupported",
    "build_context",
]

#: ``realtime``: the model declares ``supports_realtime`` (it adds multimodal rows to the
#: token rows); ``non-realtime``: an ordinary multimodal model (it replaces them);
#: ``text-only``: a model without an encoder (used by D1 only).
Mode = Literal["realtime", "non-realtime", "text-only"]

#: The two modes every gather, dummy-run and real-path check runs in.
MODES: tuple[Mode, ...] = ("realtime", "non-realtime")


class ModeNotSupported(Exception):  # noqa: N818  # a refusal, not an error
    """Raised by a factory to refuse a mode; the checks of that mode are skipped.

    ``reason`` is shown in the report, so say why: ``ModeNotSupported("this state is
    written for realtime speech models only")``.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class ConformanceContext:
    """Everything a factory needs to build the object under test.

    ``model`` is a toy model the suite controls (realtime or not, see ``mode``);
    ``encoder_cache`` is the cache the suite fills before each call and inspects after
    it. Build the target around both, with the given sizes, dtype and device, and switch
    on its input validation when ``validate`` is true.
    """

    model: MultiModalModel | TextModel
    encoder_cache: InstrumentedEncoderCache
    hidden_size: int
    max_num_tokens: int
    max_num_reqs: int
    dtype: torch.dtype
    device: torch.device
    validate: bool
    mode: Mode


#: ``FACTORY(ctx) -> target``: builds the object under test.
Factory = Callable[[ConformanceContext], object]


@dataclass
class ContextParts:
    """A context together with typed handles on its toy model, encoder log and cache."""

    ctx: ConformanceContext
    model: ToyTextModel
    encoder_log: EncoderCallLog
    cache: InstrumentedEncoderCache


def build_context(
    mode: Mode,
    *,
    hidden_size: int,
    max_num_tokens: int,
    max_num_reqs: int,
    dtype: torch.dtype,
    device: torch.device,
    seed: int,
    model_class: type[ToyReplaceModel] | None = None,
) -> ContextParts:
    """A fresh context: a new toy model of the mode's kind and an empty cache.

    ``model_class`` replaces the non-realtime toy (used for models whose realtime marker
    is malformed, which must count as non-realtime).
    """
    model: ToyTextModel
    if mode == "realtime":
        model = ToyRealtimeModel(hidden_size, dtype=dtype, device=device, seed=seed)
    elif mode == "non-realtime":
        cls = ToyReplaceModel if model_class is None else model_class
        model = cls(hidden_size, dtype=dtype, device=device, seed=seed)
    else:
        model = ToyTextModel(hidden_size, dtype=dtype, device=device, seed=seed)
    encoder_log = attach_encoder_log(model)
    cache = InstrumentedEncoderCache()
    ctx = ConformanceContext(
        model=model,
        encoder_cache=cache,
        hidden_size=hidden_size,
        max_num_tokens=max_num_tokens,
        max_num_reqs=max_num_reqs,
        dtype=dtype,
        device=device,
        validate=True,
        mode=mode,
    )
    return ContextParts(ctx=ctx, model=model, encoder_log=encoder_log, cache=cache)
