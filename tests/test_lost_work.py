""".ci/lost_work.py on throwaway git repositories: it names a commit that takes back another's lines (a tree older
than main committed over newer work), and passes ordinary edits: changing or deleting others' lines, a refactor that
removes a helper someone added, a repair of a stale commit, a revert that says so, a commit a reviewer cleared."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parent.parent / ".ci" / "lost_work.py"
BASE = 'def area(w, h):\n    """The area of a w by h rectangle."""\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n'
VOLUME = "\n\ndef volume(w, h, d):\n    if d < 0:\n        raise ValueError('negative depth')\n    return w * h * d\n"


class Repo:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str, when: int = 0) -> str:
        date = f"{1_800_000_000 + when} +0000"
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": "a",
            "GIT_AUTHOR_EMAIL": "a@example.invalid",
            "GIT_COMMITTER_NAME": "a",
            "GIT_COMMITTER_EMAIL": "a@example.invalid",
            "GIT_AUTHOR_DATE": date,
            "GIT_COMMITTER_DATE": date,
        }
        env.pop("GIT_DIR", None)
        done = subprocess.run(
            ["git", *args], cwd=self.root, env=env, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    def commit(self, files: dict[str, str], message: str, when: int) -> str:
        for name, text in files.items():
            (self.root / name).write_text(text, encoding="utf-8")
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message, when=when)
        return self.git("rev-parse", "HEAD")

    def check(self, spec: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(TOOL), spec],
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    r = Repo(tmp_path)
    r.commit({"shapes.py": BASE, "README": "shapes\n"}, "base", when=0)
    return r


# B, a colleague's landed work: the area typed, in floats, with a check (BASE's three lines of it replaced), and a
# new function
LANDED = (
    'def area(w: float, h: float) -> float:\n    """The area of a w by h rectangle, in floats."""\n'
    "    if w < 0 or h < 0:\n        raise ValueError('negative side')\n    return float(w) * float(h)\n"
    "\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n\n\ndef diagonal(w, h):\n    return (w * w + h * h) ** 0.5\n"
)


def test_a_tree_older_than_main_committed_over_newer_work_is_named(repo: Repo) -> None:
    landed = repo.commit({"shapes.py": LANDED}, "area: floats, negative sides refused; diagonal", when=100)
    # a helper's copy of shapes.py from before that commit, with the helper's own change on top
    stale = BASE.replace("return 2 * (w + h)", "return 2 * w + 2 * h")
    mine = repo.commit(
        {"shapes.py": stale, "README": "shapes and sizes\n"}, "perimeter: spelled out", when=200
    )
    done = repo.check("HEAD~2..HEAD")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{mine[:12]} shapes.py: deletes" in done.stdout and f"of {landed[:12]}" in done.stdout
    assert "and restores 3 of the 3 it replaced" in done.stdout
    assert "README" not in done.stdout  # the helper's own edit of a file no one else touched is not named


def test_putting_back_work_a_stale_commit_took_is_a_repair(repo: Repo) -> None:
    repo.commit({"shapes.py": LANDED}, "area: floats, negative sides refused; diagonal", when=100)
    stale = repo.commit({"shapes.py": BASE}, "perimeter: a stale copy", when=200)
    repo.commit({"shapes.py": LANDED}, "shapes: the colleague's area again", when=300)
    done = repo.check("HEAD~1..HEAD")
    assert done.returncode == 0, done.stdout + done.stderr  # it takes back the stale commit: a repair
    assert f"{stale[:12]} shapes.py" in repo.check("HEAD~2..HEAD~1").stdout


def test_ordinary_edits_of_others_lines_pass(repo: Repo) -> None:
    repo.commit({"shapes.py": LANDED}, "area: floats, negative sides refused; diagonal", when=100)
    # later work that changes and deletes the colleague's lines knowingly: a refactor, not an undo
    refactor = LANDED.replace(
        "raise ValueError('negative side')", "raise ValueError(f'negative side: {w}, {h}')"
    )
    refactor = refactor.replace("\n\ndef diagonal(w, h):\n    return (w * w + h * h) ** 0.5\n", "")
    repo.commit({"shapes.py": refactor}, "area: the error names the sides; diagonal moved out", when=200)
    repo.commit(
        {"shapes.py": refactor.replace("float(w) * float(h)", "w * h * 1.0")}, "area: one cast", when=300
    )
    done = repo.check("HEAD~3..HEAD")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 commit(s)" in done.stdout and "nothing undone" in done.stdout


def test_a_commit_a_reviewer_cleared_passes(repo: Repo) -> None:
    repo.commit({"shapes.py": LANDED}, "area: floats, negative sides refused; diagonal", when=100)
    mine = repo.commit({"shapes.py": BASE}, "area: back to ints (issue #1)", when=200)
    (repo.root / ".ci").mkdir()
    reviewed = repo.root / ".ci" / "lost_work_reviewed.txt"
    reviewed.write_text(f"# reviewed\n{mine[:10]} the float area was to go: issue #1\n", encoding="utf-8")
    assert repo.check("HEAD~1..HEAD").returncode == 0
    reviewed.write_text("# reviewed\n", encoding="utf-8")
    assert repo.check("HEAD~1..HEAD").returncode == 1


def test_a_revert_that_says_so_passes(repo: Repo) -> None:
    landed = repo.commit({"shapes.py": LANDED}, "area: floats, negative sides refused; diagonal", when=100)
    repo.git("revert", "--no-edit", landed, when=200)
    done = repo.check("HEAD~2..HEAD")
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_unknown_range_is_a_usage_error(repo: Repo) -> None:
    done = repo.check("no-such-branch..HEAD")
    assert done.returncode == 2
    assert done.stderr.startswith("lost_work: git rev-list") and "Traceback" not in done.stderr
