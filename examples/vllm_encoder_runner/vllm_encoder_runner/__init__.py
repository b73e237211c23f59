"""vLLM 0.33.0's own ``EncoderRunner`` as a conformance target (runner level)."""

from vllm_encoder_runner.factory import make_encoder_runner, unpin_host_memory_on_cpu
from vllm_encoder_runner.feature_view import vllm_encoder_cache

__all__ = ["make_encoder_runner", "unpin_host_memory_on_cpu", "vllm_encoder_cache"]
