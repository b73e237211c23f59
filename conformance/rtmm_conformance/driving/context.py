"""What a factory receives (:class:`ConformanceContext`: a model and an encoder cache the
suite controls and instruments) and how it refuses a mode (:class:`ModeNotSupported`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from rtmm_conformance.settings import RunSettings
from rtmm_protocol.protocols import MultiModalModel, TextModel
from rtmm_protocol.testing.instruments import (
    EncoderCallLog,
    InstrumentedEncoderCache,
    attach_encoder_log,
)
from rtmm_protocol.testing.model_configuration import ConfigClassResolver, attach_configuration
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
    """Raised by a factory to refuse a mode; the checks of that mode are skipped, and the
    report shows ``reason``: ``ModeNotSupported("written for realtime speech models only")``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class ConformanceContext:
    """Everything a factory needs: build the target around ``model`` (a toy the suite
    controls) and ``encoder_cache`` (which the suite fills and inspects), with the given
    sizes, dtype and device, its input validation on when ``validate`` is true.

    ``model.config`` is the model's configuration (SPEC M3: the one the run names, with
    the suite's hidden size, vocabulary and dtype; one holding only those otherwise), and
    the attributes the run names are set on ``model``."""

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
    settings: RunSettings,
    *,
    hidden_size: int | None = None,
    model_class: type[ToyReplaceModel] | None = None,
    config_class: ConfigClassResolver | None = None,
) -> ContextParts:
    """A fresh context for ``settings``: a new toy model of the mode's kind, carrying the
    run's model configuration (its class from ``config_class`` where the engine has one),
    and an empty cache. ``model_class`` replaces the non-realtime toy (a malformed
    realtime marker)."""
    hidden = settings.hidden_size if hidden_size is None else hidden_size
    toys: dict[str, type[ToyTextModel]] = {
        "realtime": ToyRealtimeModel,
        "non-realtime": model_class or ToyReplaceModel,
    }
    model = toys.get(mode, ToyTextModel)(
        hidden, dtype=settings.torch_dtype, device=settings.torch_device, seed=settings.seed
    )
    attach_configuration(
        model,
        settings.configuration,
        hidden_size=hidden,
        vocab_size=model.vocab_size,
        dtype=str(settings.dtype),
        resolve=config_class,
    )
    encoder_log = attach_encoder_log(model)
    cache = InstrumentedEncoderCache()
    ctx = ConformanceContext(
        model=model,
        encoder_cache=cache,
        hidden_size=hidden,
        max_num_tokens=settings.max_num_tokens,
        max_num_reqs=settings.max_num_reqs,
        dtype=settings.torch_dtype,
        device=settings.torch_device,
        validate=True,
        mode=mode,
    )
    return ContextParts(ctx=ctx, model=model, encoder_log=encoder_log, cache=cache)
