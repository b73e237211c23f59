"""Remembers where each feature's output sits in an :class:`EncoderOutputPool`.

Asking the pool costs two dict lookups per output, which dominate a large decode step
when the caches are cold. The locator keeps, per feature-table entry, the pool start,
row count, the entry's serial and the ``id()`` of the tensor it was found for. A
remembered location is used only while the pool's owner array still shows that serial
at that start: the pool then still holds the tensor, so no other object can have taken
its ``id()``, and the tensor the cache holds now is that same object. Everything else
goes to the pool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
import torch

from rtmm_protocol.reference.feature_table import FeatureTable
from rtmm_protocol.reference.output_pool import EncoderOutputPool
from rtmm_protocol.validation import check_encoder_output

__all__ = ["PoolLocator"]

_START, _ROWS, _SERIAL, _TENSOR = range(4)


class PoolLocator:
    """Pool locations of a feature table's outputs, checked against the pool on every use."""

    def __init__(self) -> None:
        self._memo = np.zeros((0, 4), dtype=np.int64)
        self._pool: EncoderOutputPool | None = None
        self._generation = -1

    def _memo_for(self, pool: EncoderOutputPool, table: FeatureTable) -> npt.NDArray[np.int64]:
        size = table.start_key.shape[0]
        if self._pool is not pool or self._generation != table.generation:
            self._memo = np.zeros((0, 4), dtype=np.int64)
            self._pool, self._generation = pool, table.generation
        if self._memo.shape[0] < size:
            grown = np.zeros((size, 4), dtype=np.int64)
            grown[:, _SERIAL] = -1  # matches no owner entry
            grown[: self._memo.shape[0]] = self._memo
            self._memo = grown
        return self._memo

    def locate(
        self,
        pool: EncoderOutputPool,
        table: FeatureTable,
        entries: npt.NDArray[np.int64],
        identifiers: Sequence[str],
        tensors: Sequence[torch.Tensor],
        live: Mapping[str, torch.Tensor] | None,
    ) -> npt.NDArray[np.int64]:
        """First pool row of each output, mirroring the outputs not resident yet.

        ``entries`` are the features' table entries, parallel to ``identifiers`` and
        ``tensors``. An output is checked against its feature when first located (a
        remembered location was checked then): a row count other than the feature's
        ``num_embeds`` raises ``ValueError`` naming the identifier, since the rows past
        a short output belong to its neighbours. Raises :class:`PoolCapacityError` when
        the outputs cannot all be held at once.
        """
        memo = self._memo_for(pool, table)
        count = len(tensors)
        tensor_ids = np.fromiter(map(id, tensors), dtype=np.int64, count=count)
        known = memo[entries]
        valid = (known[:, _TENSOR] == tensor_ids) & (
            pool.owner[known[:, _START]] == known[:, _SERIAL]
        )
        if valid.all():
            return known[:, _START]
        stale: list[int] = np.flatnonzero(~valid).tolist()
        names = [identifiers[k] for k in stale]
        sources = [tensors[k] for k in stale]
        starts, rows = pool.ensure_resident(names, sources, live=live, keep=identifiers)
        stale_entries = entries[stale]
        wrong: list[int] = np.flatnonzero(rows != table.num_embeds[stale_entries]).tolist()
        for k, feature in zip(wrong, table.feature[stale_entries[wrong]].tolist(), strict=True):
            check_encoder_output(feature, sources[k], pool.hidden_size)
        fresh = np.stack([starts, rows, pool.serials(names), tensor_ids[stale]], axis=1)
        memo[stale_entries] = fresh
        known[stale] = fresh
        return known[:, _START]
