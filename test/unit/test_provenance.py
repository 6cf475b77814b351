"""radixlm.provenance.git_commit: the commit a benchmark header names, marked dirty when the tree is."""

from __future__ import annotations

import subprocess
from pathlib import Path

from radixlm.provenance import git_commit


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_clean_dirty_and_outside(tmp_path: Path) -> None:
    outside = tmp_path / "plain"
    outside.mkdir()
    assert git_commit(str(outside)) == "unknown"
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    script = repo / "bench.py"
    script.write_text("print(1)\n")
    _git(repo, "add", "bench.py")
    _git(repo, "commit", "-qm", "first")
    sha = _git(repo, "rev-parse", "--short", "HEAD")
    assert git_commit(str(script)) == sha  # a file: its folder's checkout
    (repo / "untracked.txt").write_text("x")
    assert git_commit(str(repo)) == sha  # untracked files do not make it dirty
    script.write_text("print(2)\n")
    assert git_commit(str(script)) == sha + "-dirty"
