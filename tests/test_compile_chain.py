"""bench/tools/compile_chain.py: the edit that changes exactly one kernel's source."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bench.tools.compile_chain import EDIT, edited

ROOT = Path(__file__).resolve().parents[1]


def _functions(text: str) -> dict[str, ast.FunctionDef]:
    return {f.name: f for f in ast.parse(text).body if isinstance(f, ast.FunctionDef)}


def test_the_edit_changes_the_first_kernels_source_alone():
    text = (ROOT / EDIT).read_text()
    new = edited(text)
    before, after = _functions(text), _functions(new)
    assert sorted(before) == sorted(after)
    changed = [n for n in before
               if ast.get_source_segment(text, before[n]) != ast.get_source_segment(new, after[n])]
    first = text.split("@triton.jit\ndef ", 1)[1].split("(", 1)[0]
    assert changed == [first]
    assert "compile_chain" in ast.get_source_segment(new, after[first])
    # a comment, not code: the kernel's body and docstring are what they were
    assert ast.unparse(before[first]) == ast.unparse(after[first])


def test_a_file_without_a_kernel_is_refused():
    with pytest.raises(ValueError, match="triton.jit"):
        edited("def f():\n    return 1\n")
