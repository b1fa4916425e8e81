"""Which test modules a falsifier run need not import.

--falsify-only runs only tests marked `falsifies`, so a test module found in a directory that names the marker
nowhere in its text, nor names a helper module beside it that does, holds no falsifier: it is not imported at all
(it would be collected, then deselected; this repository's gate imported ~90 modules to run 12 of them). A marker
can only reach an item through source that names it, so the rule keeps every falsifier: a conftest.py naming the
marker (it could mark any item) turns the rule off, and files named on the command line are always collected.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from pathlib import Path

import pytest

from falsify.untrusted.safefile import link_out_of

MARKER = "falsifies"
MAX_SOURCE = 16 * 2**20  # bytes of a test file scanned for the marker


class UnmarkedModules:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._helpers: set[str] | None = None
        self._scanned = False

    def holds_no_falsifier(self, path: Path) -> bool:
        if path.suffix != ".py" or not self._is_test_module(path):
            return False  # conftest.py and helpers: pytest decides
        if str(path) in map(str, self._arg_paths()):
            return False
        helpers = self.marker_helpers()
        if helpers is None:
            return False
        text = _read_text(path)
        return text is not None and MARKER not in text and not any(name in text for name in helpers)

    def marker_helpers(self) -> set[str] | None:
        """The module names of non-test files under the run's directories that name the marker; None when a
        conftest.py does (then every module is collected)."""
        if not self._scanned:
            self._scanned = True
            names: set[str] = set()
            for root in self._arg_paths():
                for path in sorted(root.rglob("*.py")) if root.is_dir() else []:
                    text = _read_text(path)
                    if text is None or MARKER not in text:
                        continue
                    if path.name == "conftest.py":
                        return None
                    if not self._is_test_module(path):
                        names.add(path.stem)
            self._helpers = names
        return self._helpers

    def _is_test_module(self, path: Path) -> bool:
        return any(fnmatch.fnmatch(path.name, glob) for glob in self.config.getini("python_files"))

    def _arg_paths(self) -> list[Path]:
        where = self.config.invocation_params.dir
        return [Path(where, arg.split("::")[0]).resolve() for arg in self.config.args]


def link_out(path: Path, project_root: Path) -> str | None:
    """Why `path` must not be collected: it is a link out of the project (a pack's falsifier: out of the installed
    packs' directory), or lies below one; None when it resolves inside."""
    from falsify.contracts.packs import root as packs_root

    packs = Path(os.path.abspath(packs_root()))
    root = packs if Path(os.path.abspath(path)).is_relative_to(packs) else project_root
    return link_out_of(root, path)


def _read_text(path: Path) -> str | None:
    """A test file's text, if it is a regular file (links followed, as pytest does): a FIFO named `test_x.py` is
    skipped at once, never waited on, and a read stops at 16 MiB (issue #27)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            return f.read(MAX_SOURCE).decode("utf-8", errors="replace")
    except OSError:
        return None
