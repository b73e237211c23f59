"""Exceptions raised by the contract's reference code."""

from __future__ import annotations

__all__ = ["EncoderOutputMissingError"]


class EncoderOutputMissingError(RuntimeError):
    """A feature's encoder output was needed for a gather but is not cached (SPEC G7).

    Raised only for misses inside the scheduled tokens; a miss that the drafter's
    look-ahead reaches past the scheduled end falls back to token embeddings instead.
    """

    def __init__(self, identifier: str, req_id: str) -> None:
        super().__init__(
            f"encoder output for feature {identifier!r} of request {req_id!r} is not in the "
            "encoder cache but the scheduled tokens need it; run the encoder for it before "
            "gathering"
        )
        self.identifier = identifier
        self.req_id = req_id
