"""A first-fit allocator of contiguous row ranges ("extents") in a fixed-size pool."""

from __future__ import annotations

import bisect

__all__ = ["PoolCapacityError", "RowExtentAllocator"]


class PoolCapacityError(RuntimeError):
    """A pool cannot hold an output: too few rows free, or none contiguous enough.

    The message names the identifier, the rows it needs, the rows free and the largest
    contiguous free block, so the caller can tell running out from fragmentation.
    """

    def __init__(
        self, identifier: str, rows_needed: int, rows_free: int, largest_free: int
    ) -> None:
        why = "too few rows are free" if rows_needed > rows_free else "the free rows are fragmented"
        super().__init__(
            f"cannot place the encoder output of {identifier!r} in the pool: it needs "
            f"{rows_needed} contiguous rows but only {rows_free} rows are free (largest "
            f"contiguous block {largest_free}); {why}. Free outputs that are no longer needed "
            "or create the pool with more capacity_rows"
        )
        self.identifier = identifier
        self.rows_needed = rows_needed
        self.rows_free = rows_free
        self.largest_free = largest_free


class RowExtentAllocator:
    """Hands out ``[start, start + rows)`` ranges of ``capacity`` rows and takes them back.

    Free space is a sorted list of disjoint extents, coalesced on release, so a pool
    that holds outputs of one size (realtime frames) reuses freed ranges exactly and
    one that mixes sizes stays compact. Allocation is first fit: ``O(free extents)``.
    """

    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise ValueError(f"capacity must be an int >= 0, got {capacity!r}")
        self.capacity = capacity
        # Parallel sorted lists: the free extents' starts and their lengths.
        self._starts: list[int] = [0] if capacity else []
        self._lengths: list[int] = [capacity] if capacity else []
        self._free = capacity

    @property
    def rows_free(self) -> int:
        """Rows not handed out."""
        return self._free

    @property
    def largest_free(self) -> int:
        """The longest contiguous run of free rows."""
        return max(self._lengths, default=0)

    def allocate(self, rows: int) -> int | None:
        """Return the start of a free range of ``rows`` rows, or ``None`` if none fits."""
        if rows < 0:
            raise ValueError(f"cannot allocate a negative number of rows ({rows})")
        if rows == 0:
            return 0
        for index, length in enumerate(self._lengths):
            if length >= rows:
                start = self._starts[index]
                if length == rows:
                    del self._starts[index]
                    del self._lengths[index]
                else:
                    self._starts[index] = start + rows
                    self._lengths[index] = length - rows
                self._free -= rows
                return start
        return None

    def release(self, start: int, rows: int) -> None:
        """Give ``[start, start + rows)`` back, merging it with free neighbours."""
        if rows == 0:
            return
        if start < 0 or rows < 0 or start + rows > self.capacity:
            raise ValueError(
                f"range [{start}, {start + rows}) is outside the pool of {self.capacity} rows"
            )
        index = bisect.bisect_left(self._starts, start)
        before_end = self._starts[index - 1] + self._lengths[index - 1] if index else 0
        after_start = self._starts[index] if index < len(self._starts) else self.capacity
        if (index and before_end > start) or after_start < start + rows:
            raise ValueError(f"range [{start}, {start + rows}) is already (partly) free")
        merge_before = index > 0 and before_end == start
        merge_after = index < len(self._starts) and after_start == start + rows
        if merge_before and merge_after:
            self._lengths[index - 1] += rows + self._lengths[index]
            del self._starts[index]
            del self._lengths[index]
        elif merge_before:
            self._lengths[index - 1] += rows
        elif merge_after:
            self._starts[index] = start
            self._lengths[index] += rows
        else:
            self._starts.insert(index, start)
            self._lengths.insert(index, rows)
        self._free += rows

    def claim(self, start: int, rows: int) -> None:
        """Take the specific free range ``[start, start + rows)`` (to undo a release)."""
        if rows == 0:
            return
        index = bisect.bisect_right(self._starts, start) - 1
        if index < 0 or self._starts[index] + self._lengths[index] < start + rows:
            raise ValueError(f"range [{start}, {start + rows}) is not free")
        extent_start, length = self._starts[index], self._lengths[index]
        del self._starts[index], self._lengths[index]
        before = start - extent_start
        after = extent_start + length - (start + rows)
        if after:
            self._starts.insert(index, start + rows)
            self._lengths.insert(index, after)
        if before:
            self._starts.insert(index, extent_start)
            self._lengths.insert(index, before)
        self._free -= rows

    def free_extents(self) -> list[tuple[int, int]]:
        """The free ``(start, rows)`` extents in increasing order (for tests and reports)."""
        return list(zip(self._starts, self._lengths, strict=True))
