"""rtmm-protocol: the contract by which a ModelState hands multimodal embeddings to a model.

The contract (data types, Protocols, the realtime guard) lives here; the reference
implementation is in :mod:`rtmm_protocol.reference` and the conformance suite in
:mod:`rtmm_protocol.conformance`.
"""

from rtmm_protocol._version import PROTOCOL_VERSION, __version__
from rtmm_protocol.encoder_cache import EncoderCache
from rtmm_protocol.errors import EncoderOutputMissingError
from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.placeholder import PlaceholderRange
from rtmm_protocol.protocols import (
    InputBatch,
    MMEmbeddingGatherer,
    ModelState,
    MultiModalModel,
    TextModel,
)
from rtmm_protocol.realtime import SupportsRealtime, supports_realtime
from rtmm_protocol.types import IntArray

__all__ = [
    "PROTOCOL_VERSION",
    "EncoderCache",
    "EncoderOutputMissingError",
    "InputBatch",
    "IntArray",
    "MMEmbeddingGatherer",
    "ModelState",
    "MultiModalFeature",
    "MultiModalModel",
    "PlaceholderRange",
    "SupportsRealtime",
    "TextModel",
    "__version__",
    "supports_realtime",
]
