"""Plain-text tables that read well in a CI log."""

from __future__ import annotations

from falsify.errors import terminal_safe


def table(header: list[str], rows: list[list[str]]) -> str:
    """HEADER and ROWS in columns. A cell is one terminal-safe line (an engine's name or error message, a test id
    is not ours: a control sequence in it is shown escaped, and a newline would break the columns)."""
    header = [terminal_safe(h) for h in header]
    rows = [[terminal_safe(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([line([h.upper() for h in header]), line(["-" * w for w in widths]), *map(line, rows)])
