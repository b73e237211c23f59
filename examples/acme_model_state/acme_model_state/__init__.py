"""An example ModelState for multimodal and streaming (realtime) speech models."""

from acme_model_state.factory import make_state
from acme_model_state.state import AcmeModelState

__all__ = ["AcmeModelState", "make_state"]
