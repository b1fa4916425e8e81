"""How every benchmark hands back its figures: one JSON object on stdout, and the same text in --out FILE if given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def emit(result: dict[str, Any], out: Path | None, indent: int = 2) -> int:
    """Print RESULT as JSON (and write it to OUT); the benchmark's exit code, 0."""
    text = json.dumps(result, indent=indent)
    print(text)
    if out:
        out.write_text(text + "\n", encoding="utf-8")
    return 0
