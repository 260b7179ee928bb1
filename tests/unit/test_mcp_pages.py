"""`ctxproxy mcp`'s pages: every page within the one limit, and the pages make the whole."""

from __future__ import annotations

import pytest

from proxy.cli.mcpserver import RESULT_CHARS, page_of
from proxy.errors import BadRequest


@pytest.mark.parametrize("size", [0, 10, RESULT_CHARS, RESULT_CHARS + 1, 5 * RESULT_CHARS + 7])
def test_pages_are_bounded_and_join_to_the_whole(size: int) -> None:
    text = "".join(chr(0x41 + i % 26) for i in range(size))
    pages = [page_of(text, 1)]
    while "call again with page=" in pages[-1]:
        pages.append(page_of(text, len(pages) + 1))
    assert all(len(p) <= RESULT_CHARS for p in pages)
    pieces = [p[: p.rindex("\n[ctxproxy: page")] if len(pages) > 1 else p for p in pages]
    assert "".join(pieces) == text
    with pytest.raises(BadRequest, match="past the end"):
        page_of(text, len(pages) + 1)
