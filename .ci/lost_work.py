"""Lost work: does a commit in a range undo another commit's lines without saying so?

    python3 .ci/lost_work.py [RANGE]          # default: the commits of main's history since LOST_WORK_SINCE
    python3 .ci/lost_work.py main..health     # before `git merge --ff-only health`: what would land

The failure this guards against: a helper commits from a working tree older than main (files copied over newer
ones, or a stale checkout), and the commit silently takes back lines that others landed meanwhile. An ordinary
edit also deletes others' lines, so a deleted line alone proves nothing. For each commit C of the range (merges and
the root skipped) and each file it changes, every line C deletes is traced to the commit B that added it
(`git blame` on C's parent). C is said to take back B in that file when it deletes at least MIN_RESTORED of B's
lines and puts back at least MIN_RESTORED, and at least half, of the lines B replaced there: B's hunks reverted,
not a few coincident lines of moved code. Taking back a commit that itself took back others' lines is a repair.

A commit whose message names B's hash (7 or more hex digits: "restores what 5860ffb put back") or says
"revert" (`git revert` writes "This reverts commit <hash>") undoes B on purpose and is not reported; so is a
commit listed in .ci/lost_work_reviewed.txt (its hash, then why the undo was meant), which is how a commit already on
main is cleared: main's history is never rewritten. Lines of only whitespace or punctuation are not counted.
Exit codes: 0 nothing undone; 1 a commit undoes another's lines (each named: the commit, the file, whose lines,
how many, one of them); 2 bad usage (not a git checkout, an unknown range).
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

# main's head when the check was added: history before it holds incidents found and repaired by hand (issue #50)
LOST_WORK_SINCE = "6c789a18106560daf3d403fdc6849969e34feb06"
MIN_RESTORED = 3
REVIEWED = ".ci/lost_work_reviewed.txt"  # in the checked repository's working tree
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
TRIVIAL = re.compile(r"^[\s\W]*$")  # blank, or only brackets and punctuation: matches anywhere


class UsageError(Exception):
    pass


def git(*args: str) -> str:
    proc = subprocess.run(
        ["git", *args], capture_output=True, encoding="utf-8", errors="replace", check=False
    )
    if proc.returncode != 0:
        raise UsageError(f"git {' '.join(args)}: {proc.stderr.strip() or 'failed'}")
    return proc.stdout


@dataclass
class FileChange:
    """One file of one commit's diff against its parent: the old path, the deleted ranges of the old file (start,
    count) and the texts of the deleted and added lines."""

    old_path: str
    deleted_ranges: list[tuple[int, int]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)


def changes(commit: str, path: str | None = None) -> dict[str, FileChange]:
    """The commit's diff against its first parent, by new path (renames followed)."""
    args = ["diff", "-U0", "--no-color", "--find-renames", f"{commit}^", commit]
    out = git(*args, *(["--", path] if path else []))
    files: dict[str, FileChange] = {}
    current: FileChange | None = None
    old = ""
    for line in out.splitlines():
        if line.startswith("diff --git "):
            current = None
        elif line.startswith("--- "):
            old = line[6:] if line.startswith("--- a/") else ""
        elif line.startswith("+++ "):
            new = line[6:] if line.startswith("+++ b/") else ""
            current = None if not (old and new) else files.setdefault(new, FileChange(old))
        elif current is not None and (m := HUNK.match(line)):
            start, count = int(m.group(1)), int(m.group(2) or "1")
            if count:
                current.deleted_ranges.append((start, count))
        elif current is not None and line.startswith("-"):
            current.deleted.append(line[1:])
        elif current is not None and line.startswith("+"):
            current.added.append(line[1:])
    return files


def blame(commit: str, path: str, ranges: list[tuple[int, int]]) -> list[tuple[str, str, str]]:
    """(adding commit, its path then, the line) for each line of `ranges` in `commit`'s version of `path`."""
    args = ["blame", "--porcelain"]
    for start, count in ranges:
        args += ["-L", f"{start},+{count}"]
    out = git(*args, commit, "--", path)
    found, names, owner = [], {}, ""
    for line in out.splitlines():
        if re.match(r"^[0-9a-f]{40} \d+ \d+", line):
            owner = line.split()[0]
        elif line.startswith("filename "):
            names[owner] = line[len("filename ") :]
        elif line.startswith("\t"):
            found.append((owner, names.get(owner, path), line[1:]))
    return found


def meaningful(line: str) -> bool:
    return not TRIVIAL.match(line)


def undone(commit: str, repairs: bool = True) -> list[str]:
    """What `commit` takes back of other commits, one line each; [] when nothing. With `repairs`, taking back a
    commit that itself took back others' lines is a repair and not reported."""
    message = git("show", "-s", "--format=%B", commit)
    if re.search(r"\brevert", message, re.I):
        return []
    named = set(re.findall(r"\b[0-9a-f]{7,40}\b", message))  # commits the message names: undone knowingly
    found = []
    for path, change in sorted(changes(commit).items()):
        if not change.deleted_ranges:
            continue
        by_owner: dict[str, list[str]] = defaultdict(list)
        owner_path: dict[str, str] = {}
        for owner, then, line in blame(f"{commit}^", change.old_path, change.deleted_ranges):
            if meaningful(line):
                by_owner[owner].append(line)
                owner_path[owner] = then
        added = Counter(line for line in change.added if meaningful(line))
        for owner, lines in sorted(by_owner.items()):
            if owner.startswith(commit) or owner.startswith("0000000") or len(lines) < MIN_RESTORED:
                continue
            if any(owner.startswith(word) for word in named):
                continue
            try:
                theirs = changes(owner, owner_path[owner]).get(owner_path[owner])
            except UsageError:  # the root commit: nothing it replaced
                continue
            replaced = Counter(line for line in (theirs.deleted if theirs else []) if meaningful(line))
            restored = sum((replaced & added).values())
            # a few of its lines back among other work is code moved, not the commit taken back
            if restored < MIN_RESTORED or 2 * restored < sum(replaced.values()):
                continue
            if repairs and takes_back(owner):
                continue
            found.append(
                f"{commit[:12]} {path}: deletes {len(lines)} line(s) of {owner[:12]} and restores {restored} of "
                f"the {sum(replaced.values())} it replaced, e.g. {lines[0].strip()[:80]!r}"
            )
    return found


@functools.cache
def takes_back(commit: str) -> bool:
    """Did `commit` itself take back others' lines? (Then undoing it restores their work.)"""
    return bool(
        git("rev-list", "--parents", "-n", "1", commit).count(" ") == 1 and undone(commit, repairs=False)
    )


def reviewed() -> set[str]:
    """The commits whose undo a reviewer judged intended: the first word of each line of REVIEWED ('#': comment)."""
    path = Path(git("rev-parse", "--show-toplevel").strip()) / REVIEWED
    if not path.is_file():
        return set()
    lines = path.read_text(encoding="utf-8").splitlines()
    return {line.split()[0] for line in lines if line.strip() and not line.startswith("#")}


def commits(spec: str) -> list[str]:
    return git("rev-list", "--reverse", "--no-merges", "--first-parent", spec).split()


def main(argv: list[str]) -> int:
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        print("usage: python3 .ci/lost_work.py [RANGE]", file=sys.stderr)
        return 2
    spec = argv[0] if argv else f"{LOST_WORK_SINCE}..HEAD"
    try:
        todo = [c for c in commits(spec) if git("rev-list", "--parents", "-n", "1", c).count(" ") == 1]
        cleared = reviewed()
        report = [line for c in todo if not any(c.startswith(r) for r in cleared) for line in undone(c)]
    except UsageError as exc:
        print(f"lost_work: {exc}", file=sys.stderr)
        return 2
    for line in report:
        print(line)
    print(
        f"lost_work: {len(todo)} commit(s) of {spec}: {'lines of others undone' if report else 'nothing undone'}"
    )
    return 1 if report else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
