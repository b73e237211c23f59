"""The per-request loop the vectorized plan replaces, written out as the benchmark baseline.

It mirrors the algorithm serving engines run on every step, data structure for data
structure, so that the ratios compare against what a faithful port would cost:

- ``is_mm_embed`` is a torch CPU ``bool`` tensor of the step's scheduled tokens, built
  by assigning each contributing piece's stretch in turn: ``mask[a:b] = True`` for a
  feature without ``is_embed``, ``mask[a:b] = is_embed[lo:hi]`` (a tensor slice) for a
  masked one. That tensor is what is returned; there is no numpy intermediate, because
  the engines' loop has none (each slice assignment is a torch indexing call, which is
  most of its per-request cost).
- per request, the sorted features are bisected for the first one that ends after the
  window start (where engines scan from the first feature, the bisect only makes the
  baseline faster on long streams), then walked while they start before the window
  end; each overlapping one is looked up in the output dict and sliced to a view.

It follows SPEC G1-G10 exactly (the benchmark checks it against the plan), so the
comparison is between two correct gathers. The package never imports this module.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

import torch

from rtmm_protocol import EncoderOutputMissingError, MultiModalFeature
from rtmm_protocol.types import IntArray

__all__ = ["loop_gather"]


def _feature_end(feature: MultiModalFeature) -> int:
    return feature.mm_position.offset + feature.mm_position.length


def loop_gather(
    mm_features: Mapping[str, Sequence[MultiModalFeature]],
    encoder_outputs: Mapping[str, torch.Tensor],
    is_realtime: bool,
    req_ids: Sequence[str],
    total_num_scheduled_tokens: int,
    num_scheduled_tokens: IntArray,
    query_start_loc: IntArray,
    prefill_lens: IntArray,
    num_computed_tokens: IntArray,
    draft_lookahead: int = 0,
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """``(mm_embeds, is_mm_embed)`` computed request by request, feature by feature."""
    is_mm_embed = torch.zeros(total_num_scheduled_tokens, dtype=torch.bool)
    mm_embeds: list[torch.Tensor] = []
    for i, req_id in enumerate(req_ids):
        num_sched = int(num_scheduled_tokens[i])
        if num_sched == 0:
            continue
        computed = int(num_computed_tokens[i])
        start = computed + draft_lookahead
        if not is_realtime and start >= int(prefill_lens[i]):
            continue
        end = start + num_sched
        slot_base = int(query_start_loc[i])
        features = mm_features.get(req_id, ())
        first = bisect.bisect_right(features, start, key=_feature_end)
        for index in range(first, len(features)):
            feature = features[index]
            pos = feature.mm_position
            if pos.offset >= end:
                break
            lo = max(start, pos.offset) - pos.offset
            hi = min(end, pos.offset + pos.length) - pos.offset
            row_start, row_end = pos.get_embeds_indices_in_range(lo, hi)
            if row_start == row_end:
                continue
            output = encoder_outputs.get(feature.identifier)
            if output is None:
                if pos.offset >= computed + num_sched:
                    continue
                raise EncoderOutputMissingError(feature.identifier, req_id)
            piece = output[row_start:row_end]
            piece.modality = feature.modality  # type: ignore[attr-defined]
            mm_embeds.append(piece)
            first_slot = slot_base + pos.offset + lo - start
            if pos.is_embed is None:
                is_mm_embed[first_slot : first_slot + hi - lo] = True
            else:
                is_mm_embed[first_slot : first_slot + hi - lo] = pos.is_embed[lo:hi]
    return mm_embeds, is_mm_embed
