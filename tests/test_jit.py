"""The compiled kernels' cache key: a digest of every kernel module, the protocols' included
(the stages inline them, and Numba keys a cached function by its own file only)."""

from __future__ import annotations

from pathlib import Path

from ubepsim.kernels.jit import sources_digest


def _tree(root: Path) -> Path:
    (root / "protocols").mkdir(parents=True)
    (root / "dispatch.py").write_text("A = 1\n")
    (root / "protocols" / "ubep.py").write_text("B = 2\n")
    return root


def test_the_digest_changes_with_a_module_in_a_subfolder(tmp_path):
    root = _tree(tmp_path / "kernels")
    before = sources_digest(root)
    (root / "protocols" / "ubep.py").write_text("B = 3\n")
    assert sources_digest(root) != before


def test_the_digest_changes_when_a_module_moves_to_another_folder(tmp_path):
    root = _tree(tmp_path / "kernels")
    before = sources_digest(root)
    (root / "other").mkdir()
    (root / "protocols" / "ubep.py").rename(root / "other" / "ubep.py")
    assert sources_digest(root) != before


def test_the_digest_depends_on_the_sources_not_on_where_the_tree_is(tmp_path):
    one, two = _tree(tmp_path / "one"), _tree(tmp_path / "two")
    (one / "notes.txt").write_text("not a module")
    assert sources_digest(one) == sources_digest(two)
