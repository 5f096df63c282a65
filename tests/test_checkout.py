"""What running the suite writes into a checkout is ignored by git, so that it never shows as a
change or lands in a commit."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


# Hypothesis's example database, pytest's cache, coverage's data file, compiled modules: each
# written below the directory the suite runs from (the root, as the README runs it).
@pytest.mark.parametrize("path", [".hypothesis/examples/0a", ".pytest_cache/v/cache/lastfailed",
                                  ".coverage", "tests/__pycache__/conftest.cpython-312.pyc"])
def test_what_the_suite_writes_is_ignored(path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    # --no-index: ignored by the rules, whether or not such a file exists or is tracked
    check = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT)
    assert check.returncode == 0, f"{path} is not ignored"
