"""Tag a gathered piece with its feature's modality, in code that ``mypy --strict`` accepts.

Clause G6 asks that each piece of ``mm_embeds`` carry its feature's modality as
``piece.modality`` (a SHOULD). ``torch.Tensor`` declares no such attribute, so a plain
``piece.modality = ...`` is an ``attr-defined`` error under ``mypy --strict`` and pyright;
:func:`with_modality` keeps that one assignment here, checked, and returns the same
tensor, so an implementation needs neither ``setattr`` nor a ``type: ignore``.
"""

from __future__ import annotations

import torch

__all__ = ["with_modality"]


def with_modality(piece: torch.Tensor, modality: str) -> torch.Tensor:
    """Set ``piece.modality`` to ``modality`` and return ``piece`` itself (no copy).

    The piece stays the view of the cached encoder output it was (G6); only the
    attribute is added. Raises ``TypeError`` naming the type for a non-tensor piece and
    ``ValueError`` naming the value for a modality that is not a string.
    """
    if not isinstance(piece, torch.Tensor):
        raise TypeError(f"with_modality needs a torch.Tensor piece, got {type(piece).__name__}")
    if not isinstance(modality, str):
        raise ValueError(f"modality must be a str such as 'image' or 'audio', got {modality!r}")
    piece.modality = modality  # type: ignore[attr-defined]  # torch.Tensor declares no attribute
    return piece
