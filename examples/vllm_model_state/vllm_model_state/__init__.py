"""vLLM 0.33.0's ModelRunner V2 model state as a conformance target (ModelState level)."""

from vllm_model_state.factory import make_model_state
from vllm_model_state.state import VllmDefaultModelState

__all__ = ["VllmDefaultModelState", "make_model_state"]
