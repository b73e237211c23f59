"""rtmm-protocol: the contract by which a ModelState hands multimodal embeddings to a model.

The contract (data types, Protocols, the realtime guard) lives here; the reference
implementation is in :mod:`rtmm_protocol.reference` and the conformance suite in
:mod:`rtmm_conformance`, a package of its own.

The public names are imported on first use: pytest loads the suite's plugin in every run
of every project that installs this package, and that must not cost a ``torch`` import
unless the suite is actually asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from rtmm_protocol._version import PROTOCOL_VERSION, __version__

if TYPE_CHECKING:
    from rtmm_protocol.encoder_cache import EncoderCache
    from rtmm_protocol.errors import EncoderOutputMissingError
    from rtmm_protocol.feature import MultiModalFeature
    from rtmm_protocol.modality import with_modality
    from rtmm_protocol.placeholder import PlaceholderRange
    from rtmm_protocol.protocols import (
        InputBatch,
        MMEmbeddingGatherer,
        ModelInputsHooks,
        ModelState,
        MultiModalModel,
        TextModel,
    )
    from rtmm_protocol.realtime import SupportsRealtime, supports_realtime
    from rtmm_protocol.types import IntArray
    from rtmm_protocol.vllm_protocols import VllmInputBatch, VllmModelState

__all__ = [
    "PROTOCOL_VERSION",
    "EncoderCache",
    "EncoderOutputMissingError",
    "InputBatch",
    "IntArray",
    "MMEmbeddingGatherer",
    "ModelInputsHooks",
    "ModelState",
    "MultiModalFeature",
    "MultiModalModel",
    "PlaceholderRange",
    "SupportsRealtime",
    "TextModel",
    "VllmInputBatch",
    "VllmModelState",
    "__version__",
    "supports_realtime",
    "with_modality",
]

# Public name -> defining module, for the lazy imports below.
_EXPORTS = {
    "EncoderCache": "rtmm_protocol.encoder_cache",
    "EncoderOutputMissingError": "rtmm_protocol.errors",
    "InputBatch": "rtmm_protocol.protocols",
    "IntArray": "rtmm_protocol.types",
    "MMEmbeddingGatherer": "rtmm_protocol.protocols",
    "ModelInputsHooks": "rtmm_protocol.protocols",
    "ModelState": "rtmm_protocol.protocols",
    "MultiModalFeature": "rtmm_protocol.feature",
    "MultiModalModel": "rtmm_protocol.protocols",
    "PlaceholderRange": "rtmm_protocol.placeholder",
    "SupportsRealtime": "rtmm_protocol.realtime",
    "TextModel": "rtmm_protocol.protocols",
    "VllmInputBatch": "rtmm_protocol.vllm_protocols",
    "VllmModelState": "rtmm_protocol.vllm_protocols",
    "supports_realtime": "rtmm_protocol.realtime",
    "with_modality": "rtmm_protocol.modality",
}


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rtmm_protocol' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
