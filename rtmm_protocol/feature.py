"""One multimodal item of a request."""

from __future__ import annotations

from dataclasses import dataclass

from rtmm_protocol.placeholder import PlaceholderRange

__all__ = ["MultiModalFeature"]


@dataclass(frozen=True)
class MultiModalFeature:
    """An image, audio chunk or other item placed at ``mm_position`` in its request.

    ``identifier`` keys the item's encoder output in the :class:`EncoderCache`.
    ``data`` is the encoder input: a mapping passed to ``model.embed_multimodal(**data)``,
    or ``None`` when the output is provided some other way (for example precomputed).

    A feature is a frozen value (SPEC C1): to change one, build a new one
    (``dataclasses.replace(feature, data=...)``) and put it in the request's list.
    States may then keep what they derive from a feature for as long as they hold it.
    """

    identifier: str
    modality: str
    mm_position: PlaceholderRange
    data: object = None

    def __post_init__(self) -> None:
        if not isinstance(self.identifier, str) or not self.identifier:
            raise ValueError(
                f"MultiModalFeature.identifier must be a non-empty str, got {self.identifier!r}"
            )
        if not isinstance(self.modality, str):
            raise ValueError(
                f"MultiModalFeature.modality of {self.identifier!r} must be a str, "
                f"got {self.modality!r}"
            )
        if not isinstance(self.mm_position, PlaceholderRange):
            raise ValueError(
                f"MultiModalFeature.mm_position of {self.identifier!r} must be a "
                f"PlaceholderRange, got {type(self.mm_position).__name__}"
            )
