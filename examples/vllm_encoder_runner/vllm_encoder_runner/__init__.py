"""vLLM 0.33.0's own ``EncoderRunner`` as a conformance target (runner level)."""

from vllm_encoder_runner.factory import make_encoder_runner

__all__ = ["make_encoder_runner"]
