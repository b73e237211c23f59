"""The reference implementation of the contract, on CPU and CUDA.

(The input batch and toy models of :mod:`rtmm_protocol.testing` are exported for 0.1 code.)
"""

from rtmm_protocol.reference.encoder_runner import EncoderRunner, default_arena_rows
from rtmm_protocol.reference.gather_plan import MMGatherPlan
from rtmm_protocol.reference.model_state import ReferenceModelState
from rtmm_protocol.reference.output_arena import ArenaFullError, EncoderOutputArena
from rtmm_protocol.testing.input_batch import ReferenceInputBatch
from rtmm_protocol.testing.toy_models import (
    ToyRealtimeModel,
    ToyReplaceModel,
    ToyTextModel,
    make_input_features,
)

__all__ = [
    "ArenaFullError",
    "EncoderOutputArena",
    "EncoderRunner",
    "MMGatherPlan",
    "ReferenceInputBatch",
    "ReferenceModelState",
    "ToyRealtimeModel",
    "ToyReplaceModel",
    "ToyTextModel",
    "default_arena_rows",
    "make_input_features",
]
