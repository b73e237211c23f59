"""``with_modality``: tags a gathered piece in place, as clause G6 asks, and checks its input."""

from __future__ import annotations

import pytest
import torch

from rtmm_protocol.modality import with_modality


def test_tags_the_same_view_without_copying() -> None:
    output = torch.arange(12.0).reshape(4, 3)
    piece = output[1:3]
    tagged = with_modality(piece, "audio")
    assert tagged is piece
    assert tagged.modality == "audio"  # type: ignore[attr-defined]  # set by with_modality
    assert tagged.untyped_storage().data_ptr() == output.untyped_storage().data_ptr()
    assert not hasattr(output, "modality"), "the cached output itself is left alone (G8)"


def test_rejects_what_is_not_a_piece_or_a_modality() -> None:
    with pytest.raises(TypeError, match=r"needs a torch\.Tensor piece, got list"):
        with_modality([1.0], "image")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"modality must be a str .* got None"):
        with_modality(torch.zeros(1, 2), None)  # type: ignore[arg-type]
