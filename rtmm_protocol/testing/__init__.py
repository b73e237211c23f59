"""What tests of a ModelState need, in the manner of ``numpy.testing`` and ``torch.testing``.

A concrete :class:`ReferenceInputBatch` built from per-request lists, and toy models whose
outputs are easy to predict: :class:`ToyReplaceModel` (an ordinary multimodal model that
replaces token rows), :class:`ToyRealtimeModel` (a realtime model that adds to them) and
:class:`ToyTextModel` (no encoder). The conformance suite and the reference
implementation use the same ones, so a user's own tests see what the suite sees.

Names are imported on first use, as in :mod:`rtmm_protocol`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rtmm_protocol.testing.input_batch import ReferenceInputBatch
    from rtmm_protocol.testing.toy_models import (
        ToyRealtimeModel,
        ToyReplaceModel,
        ToyTextModel,
        make_input_features,
    )

__all__ = [
    "ReferenceInputBatch",
    "ToyRealtimeModel",
    "ToyReplaceModel",
    "ToyTextModel",
    "make_input_features",
]

# Public name -> defining module, for the lazy imports below.
_EXPORTS = {
    "ReferenceInputBatch": "rtmm_protocol.testing.input_batch",
    "ToyRealtimeModel": "rtmm_protocol.testing.toy_models",
    "ToyReplaceModel": "rtmm_protocol.testing.toy_models",
    "ToyTextModel": "rtmm_protocol.testing.toy_models",
    "make_input_features": "rtmm_protocol.testing.toy_models",
}


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rtmm_protocol.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
