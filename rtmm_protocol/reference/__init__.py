"""The reference implementation of the contract, on CPU and CUDA."""

from rtmm_protocol.reference.encoder_runner import EncoderRunner
from rtmm_protocol.reference.input_batch import ReferenceInputBatch
from rtmm_protocol.reference.model_state import ReferenceModelState
from rtmm_protocol.reference.toy_models import (
    ToyRealtimeModel,
    ToyReplaceModel,
    ToyTextModel,
    make_input_features,
)

__all__ = [
    "EncoderRunner",
    "ReferenceInputBatch",
    "ReferenceModelState",
    "ToyRealtimeModel",
    "ToyReplaceModel",
    "ToyTextModel",
    "make_input_features",
]
