"""Plain-text tables that read well in a CI log."""

from __future__ import annotations


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([line([h.upper() for h in header]), line(["-" * w for w in widths]), *map(line, rows)])
