"""Where a multimodal item sits among a request's token positions."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import torch

__all__ = ["PlaceholderRange"]


@dataclass(frozen=True, eq=False)
class PlaceholderRange:
    """The token positions ``[offset, offset + length)`` that one feature occupies.

    ``is_embed``, when given, is a boolean mask of shape ``(length,)`` saying which of
    those positions receive an encoder-output row; the others keep their token
    embedding. Construction checks the fields and raises ``ValueError`` naming the
    field and value, so a malformed range never reaches a gather.
    """

    offset: int
    length: int
    is_embed: torch.Tensor | None = None
    # Prefix sums of ``is_embed`` (length + 1 entries), derived once on first use.
    # Memoizing a derived value is allowed by the contract (SPEC G8).
    _embed_prefix: npt.NDArray[np.int64] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if isinstance(self.offset, bool) or not isinstance(self.offset, (int, np.integer)):
            raise ValueError(f"PlaceholderRange.offset must be an int, got {self.offset!r}")
        if isinstance(self.length, bool) or not isinstance(self.length, (int, np.integer)):
            raise ValueError(f"PlaceholderRange.length must be an int, got {self.length!r}")
        if self.offset < 0:
            raise ValueError(f"PlaceholderRange.offset must be >= 0, got {self.offset}")
        if self.length < 0:
            raise ValueError(f"PlaceholderRange.length must be >= 0, got {self.length}")
        object.__setattr__(self, "offset", int(self.offset))
        object.__setattr__(self, "length", int(self.length))
        mask = self.is_embed
        if mask is not None:
            if not isinstance(mask, torch.Tensor):
                raise ValueError(
                    f"PlaceholderRange.is_embed must be a torch.Tensor or None, "
                    f"got {type(mask).__name__}"
                )
            if mask.dtype != torch.bool:
                raise ValueError(
                    f"PlaceholderRange.is_embed must have dtype torch.bool, got {mask.dtype}"
                )
            if mask.is_meta:
                raise ValueError(
                    "PlaceholderRange.is_embed is on the meta device and holds no values; "
                    "give a CPU or device tensor"
                )
            if tuple(mask.shape) != (self.length,):
                raise ValueError(
                    f"PlaceholderRange.is_embed must have shape ({self.length},) to match "
                    f"length={self.length}, got {tuple(mask.shape)}"
                )

    @property
    def end(self) -> int:
        """One past the last position of the placeholder."""
        return self.offset + self.length

    def embed_prefix(self) -> npt.NDArray[np.int64]:
        """Return ``c`` with ``c[q]`` = embed positions among placeholder indices ``[0, q)``.

        The array has ``length + 1`` entries and is computed once per range.
        """
        prefix = self._embed_prefix
        if prefix is None:
            if self.is_embed is None:
                prefix = np.arange(self.length + 1, dtype=np.int64)
            else:
                flags = self.is_embed.detach().to("cpu").numpy().astype(np.int64)
                prefix = np.zeros(self.length + 1, dtype=np.int64)
                np.cumsum(flags, out=prefix[1:])
            prefix.setflags(write=False)
            object.__setattr__(self, "_embed_prefix", prefix)
        return prefix

    def get_num_embeds(self) -> int:
        """Number of positions that receive an encoder-output row."""
        if self.is_embed is None:
            return self.length
        return int(self.embed_prefix()[-1])

    def get_embeds_indices_in_range(self, start_idx: int, end_idx: int) -> tuple[int, int]:
        """Map placeholder-relative positions ``[start_idx, end_idx)`` to encoder-output rows.

        Returns ``(first_row, end_row)``: the rows used by the embed positions among those
        positions. The pair is empty (``first_row == end_row``) when none of them embeds.
        """
        if not 0 <= start_idx <= end_idx <= self.length:
            raise ValueError(
                f"placeholder index range [{start_idx}, {end_idx}) is outside "
                f"[0, {self.length}] for PlaceholderRange(offset={self.offset}, length={self.length})"
            )
        if self.is_embed is None:
            return start_idx, end_idx
        prefix = self.embed_prefix()
        return int(prefix[start_idx]), int(prefix[end_idx])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PlaceholderRange):
            return NotImplemented
        if (self.offset, self.length) != (other.offset, other.length):
            return False
        if self.is_embed is None or other.is_embed is None:
            return self.is_embed is None and other.is_embed is None
        return bool(torch.equal(self.is_embed.cpu(), other.is_embed.cpu()))

    def __hash__(self) -> int:
        return hash((self.offset, self.length, self.get_num_embeds()))
