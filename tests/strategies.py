"""Shared hypothesis strategies."""

from __future__ import annotations

from hypothesis import strategies as st

# Every code point a UTF-8 string can hold: all but the surrogates (category Cs). The
# same set as st.text()'s default alphabet (codec="utf-8"), without the codec table
# hypothesis builds on first use in a fresh clone: 18 s at load 7 (the charmap this uses
# takes 2.5 s), paid by whichever test first asks for text.
UTF8_CHARACTERS = st.characters(exclude_categories=("Cs",))


def text(*, min_size: int = 0, max_size: int | None = None) -> st.SearchStrategy[str]:
    """Any UTF-8 text, as ``st.text(min_size=..., max_size=...)`` gives."""
    return st.text(UTF8_CHARACTERS, min_size=min_size, max_size=max_size)
