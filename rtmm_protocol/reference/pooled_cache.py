"""An :class:`~rtmm_protocol.EncoderCache` whose outputs live in one pre-allocated pool."""

from __future__ import annotations

import torch

from rtmm_protocol.encoder_cache import EncoderCache
from rtmm_protocol.reference.output_pool import EncoderOutputPool

__all__ = ["PooledEncoderCache"]


class PooledEncoderCache(EncoderCache):
    """The encoder cache with every output copied into an :class:`EncoderOutputPool`.

    The interface is :class:`~rtmm_protocol.EncoderCache`'s. :meth:`put_encoder_output`
    (and an :class:`~rtmm_protocol.reference.EncoderRunner` encoding for this cache)
    copies the output into the pool and caches the pool's view of those rows, so a
    gather's rows are one ``index_select`` away and never move. The dicts stay plain:
    a tensor assigned to ``encoder_outputs`` directly is used as it is for the list form
    and mirrored into the pool the first time :meth:`MMGatherPlan.rows` needs it.

    Capacity is fixed. When an output does not fit, rows whose identifier the dict no
    longer holds are reclaimed and mirrors evicted; if it still does not fit,
    :class:`~rtmm_protocol.reference.PoolCapacityError` (a ``RuntimeError``) names the
    identifier, the rows it needs and the rows free. :meth:`free_encoder_output` gives
    the rows back; views handed out before then must not be used afterwards.
    """

    def __init__(
        self,
        capacity_rows: int,
        hidden_size: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(hidden_size)
        #: Where the cached outputs' rows live.
        self.output_pool = EncoderOutputPool(capacity_rows, hidden_size, dtype=dtype, device=device)

    def _admit(self, identifier: str, output: torch.Tensor) -> torch.Tensor:
        return self.output_pool.store(identifier, output, live=self.encoder_outputs)

    def free_encoder_output(self, identifier: str) -> None:
        """Drop the output of ``identifier`` and give its pool rows back."""
        super().free_encoder_output(identifier)
        self.output_pool.release(identifier)

    def reclaim(self) -> int:
        """Free the pool rows of outputs deleted or replaced directly in the dict."""
        return self.output_pool.reclaim(self.encoder_outputs)
