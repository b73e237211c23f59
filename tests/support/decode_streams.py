"""Many realtime requests decoding one token a step over streamed audio chunks.

Batches of single-position windows are the realtime hot path, and gatherers optimise
them (for instance by remembering, per batch slot, the feature found last step). These
streams exercise that path over several steps while the batch order changes, requests
pause, new chunks arrive and old outputs are freed. Built from one seed, so Hypothesis
only chooses seeds and CI stays reproducible.
"""

from __future__ import annotations

import numpy as np
import torch

from rtmm_protocol import EncoderCache, MultiModalFeature, PlaceholderRange
from rtmm_protocol.testing.scenario import encoder_output_for
from support.gather_check import GatherCall
from support.recording_dict import RecordingDict

__all__ = ["DecodeStreams"]


class DecodeStreams:
    """A cache of ``num_streams`` realtime requests and the batch of their next decode step."""

    def __init__(self, seed: int, num_streams: int, hidden_size: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.hidden_size = hidden_size
        self.cache = EncoderCache()
        self.outputs: RecordingDict[str, torch.Tensor] = RecordingDict()
        self.cache.encoder_outputs = self.outputs
        self.batch_order = [f"s{i}" for i in range(num_streams)]
        self.paused: list[str] = []
        self.position: dict[str, int] = {}
        self._next_id = 0
        for req_id in self.batch_order:
            start = int(self.rng.integers(0, 4))
            self.cache.add_request(req_id, self._chunks(start, int(self.rng.integers(0, 4))))
            self.position[req_id] = int(self.rng.integers(0, 6))

    def next_call(self, draft_lookahead: int) -> GatherCall:
        """One token per request (a few schedule none), all of them decoding."""
        count = len(self.batch_order)
        scheduled = (self.rng.random(count) > 0.05).astype(np.int32)
        qsl = np.zeros(count + 1, dtype=np.int32)
        np.cumsum(scheduled, out=qsl[1:])
        computed = np.array([self.position[r] for r in self.batch_order], dtype=np.int32)
        for req_id, end in zip(self.batch_order, computed + scheduled, strict=True):
            self._encode_due(req_id, int(end))
        arrays = {
            "num_scheduled_tokens": scheduled,
            "query_start_loc": qsl,
            "prefill_lens": np.minimum(computed, self.rng.integers(0, 3, count)).astype(np.int32),
            "num_computed_tokens": computed,
        }
        return GatherCall(list(self.batch_order), arrays, draft_lookahead)

    def advance(self, call: GatherCall) -> None:
        """Move every scheduled request on by its token, then change the batch and cache."""
        for req_id, n in zip(call.req_ids, call.arrays["num_scheduled_tokens"], strict=True):
            self.position[req_id] += int(n)
        rng = self.rng
        order = self.batch_order
        for _ in range(int(rng.integers(0, 3))):  # requests trade places in the batch
            i, j = rng.integers(0, len(order), 2)
            order[i], order[j] = order[j], order[i]
        if len(order) > 1 and rng.random() < 0.3:  # a request leaves the batch for a while
            self.paused.append(order.pop(int(rng.integers(0, len(order)))))
        if self.paused and rng.random() < 0.3:  # and comes back somewhere else
            order.insert(int(rng.integers(0, len(order) + 1)), self.paused.pop(0))
        for req_id in rng.choice(order, size=min(4, len(order)), replace=False):
            self._grow(str(req_id))
        consumed = [
            feature.identifier
            for req_id in order
            for feature in dict.__getitem__(self.cache.mm_features, req_id)
            if feature.mm_position.end <= self.position[req_id]
        ]
        if consumed and rng.random() < 0.5:  # an output the stream has moved past is freed
            self.cache.free_encoder_output(str(rng.choice(consumed)))

    def _encode_due(self, req_id: str, scheduled_end: int) -> None:
        """Cache the outputs the scheduled tokens need, as the engine does before gathering.

        Chunks starting at or past the scheduled end stay as they are (the look-ahead may
        reach them: a tolerated miss); once in a long while a needed one is left out, so
        the step must raise.
        """
        for feature in dict.__getitem__(self.cache.mm_features, req_id):
            if feature.mm_position.offset >= scheduled_end:
                break
            if (
                not dict.__contains__(self.outputs, feature.identifier)
                and self.rng.random() > 0.002
            ):
                self._store(feature)

    def _grow(self, req_id: str) -> None:
        """A new audio chunk arrives after the request's last one (sometimes not encoded)."""
        features = dict.__getitem__(self.cache.mm_features, req_id)
        start = max(self.position[req_id], features[-1].mm_position.end if features else 0)
        for feature in self._chunks(start, 1):
            self.cache.append_feature(req_id, feature)

    def _chunks(self, start: int, count: int) -> list[MultiModalFeature]:
        rng = self.rng
        chunks = []
        cursor = start
        for _ in range(count):
            offset = cursor + int(rng.integers(0, 3))
            length = int(rng.integers(1, 4))
            mask = None
            if rng.random() < 0.3:
                mask = torch.from_numpy(rng.random(length) < 0.6)
            identifier = f"chunk{self._next_id}"
            self._next_id += 1
            feature = MultiModalFeature(identifier, "audio", PlaceholderRange(offset, length, mask))
            if rng.random() < 0.6:
                self._store(feature)
            chunks.append(feature)
            cursor = offset + length
        return chunks

    def _store(self, feature: MultiModalFeature) -> None:
        num_embeds = feature.mm_position.get_num_embeds()
        output = encoder_output_for(feature.identifier, num_embeds, self.hidden_size)
        dict.__setitem__(self.outputs, feature.identifier, output)
