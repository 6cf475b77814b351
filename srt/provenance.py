"""The git commit a benchmark ran on, for the header it prints (benchmark/RESULTS.md records it)."""

from __future__ import annotations

import os
import subprocess
from typing import Optional


def git_commit(inside: Optional[str] = None) -> str:
    """HEAD's short hash of the checkout holding `inside` (a file or folder; default: the current
    folder), with `-dirty` when the tree has uncommitted changes; "unknown" outside a git checkout."""
    where = inside or os.getcwd()
    if os.path.isfile(where):
        where = os.path.dirname(os.path.abspath(where))
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                             cwd=where, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=where, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha + ("-dirty" if dirty else "") if sha else "unknown"
