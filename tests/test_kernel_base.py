"""bench/tools/kernel_base.py: an old main's kernel tree on today's protected model, the base of
issue 36's whole-gain bench (``gpu_evidence.sh final``)."""
from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("kernel_base", ROOT / "bench" / "tools" / "kernel_base.py")
kernel_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kernel_base)

EDITABLE, PROTECTED = ["kernels/k31/**"], ["kernels/k31/reference.py", "kernels/k31/*/reference.py"]


def test_only_editable_unprotected_files_come_from_the_old_tree():
    old = {"kernels/k31/moe/experts.py": ("100644", "a1"), "kernels/k31/moe/reference.py": ("100644", "r1"),
           "kernels/k31/gone_since.py": ("100644", "g1"), "kernels/k31/same.py": ("100644", "s"),
           "gates/x.py": ("100644", "x1"), "kernels/k31/run.sh": ("100644", "m")}
    new = {"kernels/k31/moe/experts.py": ("100644", "a2"), "kernels/k31/moe/reference.py": ("100644", "r2"),
           "kernels/k31/added_since.py": ("100644", "n"), "kernels/k31/same.py": ("100644", "s"),
           "gates/x.py": ("100644", "x2"), "kernels/k31/run.sh": ("100755", "m")}
    assert kernel_base.kernel_changes(old, new, EDITABLE, PROTECTED) == [
        ("kernels/k31/added_since.py", None),              # the old main lacked it: removed
        ("kernels/k31/gone_since.py", ("100644", "g1")),   # the old main had it: back
        ("kernels/k31/moe/experts.py", ("100644", "a1")),  # the old kernel
        ("kernels/k31/run.sh", ("100644", "m")),           # the mode is the old one too
    ]  # the protected reference and files outside kernels/ stay today's


def test_f52bebd_on_main_is_one_commit_over_main_with_only_its_kernel_files_and_the_same_sha_twice(tmp_path):
    repo = tmp_path / "clone"  # the objects it writes stay out of this repository
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(ROOT), str(repo)], check=True)

    def git(*args):
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True).stdout

    main = git("rev-parse", "HEAD").strip()
    sha = kernel_base.build("f52bebd", main, repo)
    assert sha == kernel_base.build("f52bebd", main, repo)  # deterministic: the device builds the same
    assert git("rev-parse", f"{sha}^").strip() == main
    changed = git("diff", "--name-only", main, sha).split()
    assert changed and all(p.startswith("kernels/k31/") and not p.endswith("reference.py") for p in changed)
    assert git("diff", "--name-only", "f52bebd", sha, "--", *changed) == ""  # each is f52bebd's


def test_a_name_that_is_no_commit_says_so():
    with pytest.raises(SystemExit, match="'nope' is not a commit"):
        kernel_base.build("nope", "HEAD")
