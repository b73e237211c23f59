"""Batches to time: realtime decode, long streams, chunked prefill, mixed steps, images.

Each builder returns a :class:`Workload`: the features and cached outputs of every
request, and the batch arrays of a few consecutive steps (decode positions advance by
one token a step, prefill chunks land elsewhere), so that no path is timed on one
repeated input. Positions and stream lengths come from a seeded generator: a workload
is the same on every run. Realtime streams keep only their most recent outputs cached
(as a serving engine's encoder cache does) and decode at their latest positions.

Caches are filled the way vLLM's engine fills them: a plain list assigned per request
into ``mm_features`` and each output assigned into ``encoder_outputs`` directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from rtmm_protocol import EncoderCache, MultiModalFeature, PlaceholderRange
from rtmm_protocol.testing import ReferenceInputBatch
from rtmm_protocol.types import IntArray

__all__ = [
    "DEFAULT_HIDDEN_SIZE",
    "Workload",
    "chunked_prefill",
    "image_prefill",
    "non_realtime_mixed",
    "realtime_decode",
]

#: The width of a real audio encoder's output (and of the benchmark's first table).
DEFAULT_HIDDEN_SIZE = 1280
#: Realtime streams keep the outputs of their newest features covering this many positions.
RECENT_POSITIONS = 32
#: Steps per workload; the timed paths cycle through them.
NUM_STEPS = 8
#: Token ids of the toy models' vocabulary.
VOCAB_SIZE = 32


@dataclass
class Workload:
    """One step's inputs over a cache's worth of requests, on one device and dtype."""

    name: str
    kind: str
    params: dict[str, int]
    realtime: bool
    hidden_size: int
    dtype: torch.dtype
    device: torch.device
    mm_features: dict[str, list[MultiModalFeature]]
    encoder_outputs: dict[str, torch.Tensor]
    req_ids: list[str]
    num_scheduled_tokens: IntArray
    #: ``num_computed_tokens`` of each step (the other arrays are the same every step).
    steps: list[IntArray]
    prefill_lens: IntArray
    query_start_loc: IntArray = field(init=False)

    def __post_init__(self) -> None:
        self.query_start_loc = np.zeros(len(self.req_ids) + 1, dtype=np.int32)
        np.cumsum(self.num_scheduled_tokens, out=self.query_start_loc[1:])

    @property
    def num_tokens(self) -> int:
        """Scheduled tokens of the step."""
        return int(self.query_start_loc[-1])

    @property
    def num_features(self) -> int:
        """Features registered over all requests."""
        return sum(len(features) for features in self.mm_features.values())

    @property
    def cached_rows(self) -> int:
        """Rows of all cached encoder outputs."""
        return sum(int(t.shape[0]) for t in self.encoder_outputs.values())

    def gather_args(
        self, step: int = 0
    ) -> tuple[list[str], int, IntArray, IntArray, IntArray, IntArray]:
        """The positional arguments of ``gather_mm_embeddings`` for a step (look-ahead 0)."""
        return (
            self.req_ids,
            self.num_tokens,
            self.num_scheduled_tokens,
            self.query_start_loc,
            self.prefill_lens,
            self.steps[step % len(self.steps)],
        )

    def input_batch(self, step: int = 0) -> ReferenceInputBatch:
        """The step as an ``InputBatch``, token ids on the workload's device."""
        return ReferenceInputBatch.from_requests(
            self.req_ids,
            self.prefill_lens.tolist(),
            self.steps[step % len(self.steps)].tolist(),
            self.num_scheduled_tokens.tolist(),
            vocab_size=VOCAB_SIZE,
            device=self.device,
        )

    def encoder_cache(self) -> EncoderCache:
        """A fresh cache over this workload's features and outputs, filled as vLLM does."""
        cache = EncoderCache(self.hidden_size)
        for req_id, features in self.mm_features.items():
            cache.mm_features[req_id] = list(features)
        for identifier, output in self.encoder_outputs.items():
            cache.encoder_outputs[identifier] = output
        return cache


def _output(
    rows: int, hidden_size: int, seed: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """A recognizable output: every row differs from its neighbours and other outputs'."""
    base = torch.arange(rows, dtype=torch.float32, device=device).unsqueeze(1) / 64
    return (base + float(seed % 251) / 8).expand(rows, hidden_size).to(dtype).contiguous()


def realtime_decode(
    num_requests: int,
    features_per_request: tuple[int, int],
    feature_length: int,
    *,
    hidden_size: int = DEFAULT_HIDDEN_SIZE,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    seed: int = 0,
) -> Workload:
    """Realtime streams decoding one token each, at a position among their newest features.

    Each stream holds between ``features_per_request[0]`` and ``[1]`` features (drawn per
    stream: streams of different ages). ``feature_length`` 8 models audio chunks; 1 models
    one frame per streaming update (a ten-minute stream holds about 7,500 of them).
    """
    low, high = features_per_request
    if not 1 <= low <= high:
        raise ValueError(
            "features_per_request must be (low, high) with 1 <= low <= high, "
            f"got {features_per_request}"
        )
    device = torch.device(device)
    rng = np.random.default_rng(seed)
    prompt = 16
    counts = rng.integers(low, high + 1, num_requests)
    # Placeholder ranges are frozen, so requests share one object per offset.
    ranges = [PlaceholderRange(prompt + k * feature_length, feature_length) for k in range(high)]
    recent = max(1, -(-RECENT_POSITIONS // feature_length))
    mm_features: dict[str, list[MultiModalFeature]] = {}
    outputs: dict[str, torch.Tensor] = {}
    positions = np.empty(num_requests, dtype=np.int32)
    req_ids = [f"stream-{r:05d}" for r in range(num_requests)]
    for r, req in enumerate(req_ids):
        count = int(counts[r])
        features = [
            MultiModalFeature(f"{req}-frame{k:05d}", "audio", ranges[k]) for k in range(count)
        ]
        mm_features[req] = features
        first = max(0, count - recent)
        for k in range(first, count):
            outputs[features[k].identifier] = _output(
                feature_length, hidden_size, r * 131 + k, dtype, device
            )
        # Start among the cached features, far enough from the end to decode every step.
        first_cached = prompt + first * feature_length
        span_end = prompt + count * feature_length
        positions[r] = int(rng.integers(first_cached, max(first_cached + 1, span_end - NUM_STEPS)))
    span = f"{low}" if low == high else f"{low}-{high}"
    return Workload(
        name=f"realtime decode R={num_requests} F={span} x{feature_length}",
        kind="realtime-decode" if feature_length > 1 else "long-streams",
        params={
            "num_requests": num_requests,
            "features_min": low,
            "features_max": high,
            "feature_length": feature_length,
        },
        realtime=True,
        hidden_size=hidden_size,
        dtype=dtype,
        device=device,
        mm_features=mm_features,
        encoder_outputs=outputs,
        req_ids=req_ids,
        num_scheduled_tokens=np.ones(num_requests, dtype=np.int32),
        steps=[np.asarray(positions + step, dtype=np.int32) for step in range(NUM_STEPS)],
        prefill_lens=np.full(num_requests, prompt, dtype=np.int32),
    )


def chunked_prefill(
    num_requests: int,
    chunk: int,
    *,
    feature_length: int = 8,
    gap: int = 2,
    prompt_chunks: int = 8,
    hidden_size: int = DEFAULT_HIDDEN_SIZE,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    seed: int = 0,
) -> Workload:
    """Prompts of audio features (``feature_length`` positions, ``gap`` text tokens
    between), each request prefilling one ``chunk``-token chunk somewhere in its prompt."""
    device = torch.device(device)
    rng = np.random.default_rng(seed)
    prompt = chunk * prompt_chunks
    stride = feature_length + gap
    ranges = [
        PlaceholderRange(gap + k * stride, feature_length) for k in range((prompt - gap) // stride)
    ]
    mm_features: dict[str, list[MultiModalFeature]] = {}
    outputs: dict[str, torch.Tensor] = {}
    req_ids = [f"prefill-{r:04d}" for r in range(num_requests)]
    for r, req in enumerate(req_ids):
        features = [
            MultiModalFeature(f"{req}-a{k}", "audio", position) for k, position in enumerate(ranges)
        ]
        mm_features[req] = features
        for k, feature in enumerate(features):
            outputs[feature.identifier] = _output(
                feature_length, hidden_size, r * 977 + k, dtype, device
            )
    steps: list[IntArray] = [
        (chunk * rng.integers(0, prompt_chunks, num_requests)).astype(np.int32)
        for _ in range(NUM_STEPS)
    ]
    return Workload(
        name=f"chunked prefill {num_requests}x{chunk}",
        kind="chunked-prefill",
        params={"num_requests": num_requests, "chunk": chunk, "feature_length": feature_length},
        realtime=False,
        hidden_size=hidden_size,
        dtype=dtype,
        device=device,
        mm_features=mm_features,
        encoder_outputs=outputs,
        req_ids=req_ids,
        num_scheduled_tokens=np.full(num_requests, chunk, dtype=np.int32),
        steps=steps,
        prefill_lens=np.full(num_requests, prompt, dtype=np.int32),
    )


_IMAGE_GAP = 16  # text tokens before and between images


def _image_requests(
    req_ids: list[str],
    num_images: int,
    image_length: int,
    row_length: int,
    hidden_size: int,
    dtype: torch.dtype,
    device: torch.device,
) -> tuple[dict[str, list[MultiModalFeature]], dict[str, torch.Tensor], int]:
    """Prompts of ``num_images`` images each, all outputs cached; and the prompt length.

    Every row of patches ends with a separator position that keeps its token embedding.
    """
    mask = torch.ones(image_length, dtype=torch.bool)
    mask[row_length - 1 :: row_length] = False
    ranges = [
        PlaceholderRange(_IMAGE_GAP + k * (image_length + _IMAGE_GAP), image_length, mask)
        for k in range(num_images)
    ]
    mm_features: dict[str, list[MultiModalFeature]] = {}
    outputs: dict[str, torch.Tensor] = {}
    for r, req in enumerate(req_ids):
        features = [MultiModalFeature(f"{req}-img{k}", "image", p) for k, p in enumerate(ranges)]
        mm_features[req] = features
        for k, feature in enumerate(features):
            rows = feature.mm_position.get_num_embeds()
            outputs[feature.identifier] = _output(rows, hidden_size, r * 31 + k, dtype, device)
    return mm_features, outputs, _IMAGE_GAP + num_images * (image_length + _IMAGE_GAP)


def image_prefill(
    num_requests: int,
    chunk: int,
    *,
    num_images: int = 4,
    image_length: int = 1024,
    row_length: int = 32,
    hidden_size: int = DEFAULT_HIDDEN_SIZE,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    seed: int = 0,
) -> Workload:
    """Prompts of images whose placeholders carry ``is_embed`` masks, prefilled in chunks."""
    device = torch.device(device)
    rng = np.random.default_rng(seed)
    req_ids = [f"image-{r:04d}" for r in range(num_requests)]
    mm_features, outputs, prompt = _image_requests(
        req_ids, num_images, image_length, row_length, hidden_size, dtype, device
    )
    steps: list[IntArray] = [
        rng.integers(0, max(1, prompt - chunk), num_requests).astype(np.int32)
        for _ in range(NUM_STEPS)
    ]
    return Workload(
        name=f"image prefill {num_requests}x{chunk}",
        kind="image-prefill",
        params={
            "num_requests": num_requests,
            "chunk": chunk,
            "num_images": num_images,
            "image_length": image_length,
        },
        realtime=False,
        hidden_size=hidden_size,
        dtype=dtype,
        device=device,
        mm_features=mm_features,
        encoder_outputs=outputs,
        req_ids=req_ids,
        num_scheduled_tokens=np.full(num_requests, chunk, dtype=np.int32),
        steps=steps,
        prefill_lens=np.full(num_requests, prompt, dtype=np.int32),
    )


def non_realtime_mixed(
    num_prefill: int,
    num_decode: int,
    chunk: int,
    *,
    num_images: int = 2,
    image_length: int = 576,
    hidden_size: int = DEFAULT_HIDDEN_SIZE,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    seed: int = 0,
) -> Workload:
    """An ordinary multimodal model's step: a few prompts in prefill, many decoding.

    Decode requests gather nothing (G2) but still cost a loop a visit each; their
    outputs are no longer cached.
    """
    device = torch.device(device)
    rng = np.random.default_rng(seed)
    req_ids = [f"mixed-{r:04d}" for r in range(num_prefill + num_decode)]
    scheduled = np.where(np.arange(len(req_ids)) < num_prefill, chunk, 1).astype(np.int32)
    mm_features, outputs, prompt = _image_requests(
        req_ids, num_images, image_length, 24, hidden_size, dtype, device
    )
    # Requests past their prompt had their outputs freed, as a serving engine does.
    for req in req_ids[num_prefill:]:
        for feature in mm_features[req]:
            del outputs[feature.identifier]
    steps: list[IntArray] = [
        np.concatenate(
            [
                rng.integers(0, max(1, prompt - chunk), num_prefill),
                prompt + rng.integers(0, 200, num_decode),
            ]
        ).astype(np.int32)
        for _ in range(NUM_STEPS)
    ]
    return Workload(
        name=f"mixed {num_prefill} prefill x{chunk} + {num_decode} decode",
        kind="non-realtime-mixed",
        params={
            "num_prefill": num_prefill,
            "num_decode": num_decode,
            "chunk": chunk,
            "num_images": num_images,
            "image_length": image_length,
        },
        realtime=False,
        hidden_size=hidden_size,
        dtype=dtype,
        device=device,
        mm_features=mm_features,
        encoder_outputs=outputs,
        req_ids=req_ids,
        num_scheduled_tokens=scheduled,
        steps=steps,
        prefill_lens=np.full(len(req_ids), prompt, dtype=np.int32),
    )
