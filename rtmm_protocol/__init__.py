"""rtmm-protocol: the contract by which a ModelState hands multimodal embeddings to a model.

The contract (data types, Protocols, the realtime guard) lives here; the reference
implementation is in :mod:`rtmm_protocol.reference` and the conformance suite in
:mod:`rtmm_protocol.conformance`.

The public names are imported on first use: pytest loads the suite's plugin in every run
of every project that installs this package, and that must not cost a ``torch`` import
unless the suite is actually asked for.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

from rtmm_protocol._version import PROTOCOL_VERSION, __version__

# The conformance suite's source lives in the repository's top-level ``conformance/``
# folder as ``conformance/rtmm_protocol/conformance/``: a second portion of this package,
# laid out so that mypy and pyright resolve ``rtmm_protocol.conformance`` from the source
# (see pyproject.toml). A wheel merges the two portions into one folder. In a source
# checkout or an editable install the checkout's portion is put right after this folder,
# ahead of any other copy of the package ``extend_path`` finds on ``sys.path``.
__path__ = __import__("pkgutil").extend_path(__path__, __name__)
_SUITE_PORTION = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conformance", __name__
)
if os.path.isdir(os.path.join(_SUITE_PORTION, "conformance")):
    __path__ = [__path__[0], _SUITE_PORTION, *(p for p in __path__[1:] if p != _SUITE_PORTION)]

if TYPE_CHECKING:
    from rtmm_protocol.encoder_cache import EncoderCache
    from rtmm_protocol.errors import EncoderOutputMissingError
    from rtmm_protocol.feature import MultiModalFeature
    from rtmm_protocol.modality import with_modality
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
    "with_modality",
]

# Public name -> defining module, for the lazy imports below.
_EXPORTS = {
    "EncoderCache": "rtmm_protocol.encoder_cache",
    "EncoderOutputMissingError": "rtmm_protocol.errors",
    "InputBatch": "rtmm_protocol.protocols",
    "IntArray": "rtmm_protocol.types",
    "MMEmbeddingGatherer": "rtmm_protocol.protocols",
    "ModelState": "rtmm_protocol.protocols",
    "MultiModalFeature": "rtmm_protocol.feature",
    "MultiModalModel": "rtmm_protocol.protocols",
    "PlaceholderRange": "rtmm_protocol.placeholder",
    "SupportsRealtime": "rtmm_protocol.realtime",
    "TextModel": "rtmm_protocol.protocols",
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
