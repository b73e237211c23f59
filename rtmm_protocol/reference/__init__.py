"""The reference implementation of the contract, on CPU and CUDA."""

from rtmm_protocol.reference.encoder_runner import EncoderRunner
from rtmm_protocol.reference.feature_table import FeatureTable
from rtmm_protocol.reference.gather_plan import MMGatherPlan
from rtmm_protocol.reference.gather_planner import GatherPlanner
from rtmm_protocol.reference.input_batch import ReferenceInputBatch
from rtmm_protocol.reference.model_state import ReferenceModelState
from rtmm_protocol.reference.output_pool import EncoderOutputPool
from rtmm_protocol.reference.pooled_cache import PooledEncoderCache
from rtmm_protocol.reference.pooled_merge import PooledRowMerger
from rtmm_protocol.reference.pooled_model_state import (
    PooledReferenceModelState,
    make_pooled_model_state,
)
from rtmm_protocol.reference.row_allocator import PoolCapacityError, RowExtentAllocator
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
    "EncoderOutputPool",
    "FeatureTable",
    "GatherPlanner",
    "MMGatherPlan",
    "PoolCapacityError",
    "PooledEncoderCache",
    "PooledReferenceModelState",
    "PooledRowMerger",
    "RowExtentAllocator",
    "make_pooled_model_state",
]
