"""Work over `[rows, vocab]` tensors (sampling, prompt logprobs) a slice of rows at a time, so that its
temporaries stay bounded at any batch size."""

from __future__ import annotations


def row_slices(num_rows: int, row_width: int, max_elements: int) -> list[slice]:
    """Consecutive slices covering `range(num_rows)`, each of `max_elements // row_width` rows (at least
    one); no rows give one empty slice, so a caller's single pass still runs and returns empty results."""
    step = max(1, max_elements // max(1, row_width))
    return [slice(i, i + step) for i in range(0, max(1, num_rows), step)]
