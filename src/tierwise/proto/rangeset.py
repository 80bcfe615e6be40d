"""A set of half-open byte ranges ``[start, end)``, kept sorted and merged (SACK blocks)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

__all__ = ["RangeSet"]


class RangeSet:
    """Sorted, disjoint, non-adjacent half-open ranges of integers."""

    __slots__ = ("_ends", "_starts")

    def __init__(self, ranges: list[tuple[int, int]] | None = None) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        for start, end in ranges or ():
            self.add(start, end)

    def add(self, start: int, end: int) -> None:
        """Add ``[start, end)``, merging with overlapping or touching ranges."""
        if end <= start:
            return
        i = bisect_left(self._ends, start)  # first range that ends at/after start
        j = i
        while j < len(self._starts) and self._starts[j] <= end:
            start = min(start, self._starts[j])
            end = max(end, self._ends[j])
            j += 1
        self._starts[i:j] = [start]
        self._ends[i:j] = [end]

    def subtract_below(self, point: int) -> None:
        """Drop everything below ``point`` (data that became cumulatively acknowledged)."""
        while self._starts and self._ends[0] <= point:
            del self._starts[0], self._ends[0]
        if self._starts and self._starts[0] < point:
            self._starts[0] = point

    def contains(self, value: int) -> bool:
        i = bisect_left(self._ends, value + 1)
        return i < len(self._starts) and self._starts[i] <= value

    def covered(self, start: int, end: int) -> bool:
        """Whether all of ``[start, end)`` is in the set."""
        i = bisect_left(self._ends, end)
        return i < len(self._starts) and self._starts[i] <= start

    def bytes_above(self, point: int) -> int:
        """Bytes in the set at or above ``point``."""
        return sum(
            e - max(s, point) for s, e in zip(self._starts, self._ends, strict=True) if e > point
        )

    def first_start(self) -> int | None:
        return self._starts[0] if self._starts else None

    def pop_first_if_starts_at(self, point: int) -> int | None:
        """If a range starts at ``point``, remove it and return its end."""
        if self._starts and self._starts[0] == point:
            end = self._ends[0]
            del self._starts[0], self._ends[0]
            return end
        return None

    def blocks(self, limit: int = 3) -> tuple[tuple[int, int], ...]:
        """Up to ``limit`` ranges, highest first (as a receiver reports SACK blocks)."""
        n = len(self._starts)
        return tuple(
            (self._starts[i], self._ends[i]) for i in range(n - 1, max(n - 1 - limit, -1), -1)
        )

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(zip(self._starts, self._ends, strict=True))

    def __len__(self) -> int:
        return len(self._starts)

    def __bool__(self) -> bool:
        return bool(self._starts)

    def __repr__(self) -> str:
        return f"RangeSet({list(self)})"
