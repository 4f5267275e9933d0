"""The tap's per-call checks on a real pass (CPU, small model, in process): every defect the
hook reports (an unwritten element, a non-finite value, a write outside a state view, any
bit difference) is found in the call that made it, and the GPU's path (the fused Triton
kernel, run here by the interpreter) records the same digests and counts as the CPU's."""
from __future__ import annotations

import importlib

import pytest
import torch

from gates.side import fingerprint, tap
from gates.side.session import Side, Spec

ROWS = 2


@pytest.fixture(scope="module")
def side():
    s = Side(Spec(model="small", layout="tp2", seed=0, weight_sets=1, context=80, steps=1,
                  rows=[ROWS + 1]), "cpu")
    return s, s.model.state.snapshot()


def _pass(side, monkeypatch=None, op=None, after=None) -> list[dict]:
    """One free pass at ROWS rows; ``after(args)`` runs after every call of ``op``'s kernel."""
    s, snap = side
    if op is not None:
        spec = importlib.import_module("kernels.k31.contracts").op(op)
        mod, name = spec.kernel.split(":")
        module = importlib.import_module(mod)
        real = getattr(module, name)

        def patched(sh, **args):
            real(sh, **args)
            after(args)
        monkeypatch.setattr(module, name, patched)
    out = tap.free_pass(s, [ROWS], 1, snap, set(), 0, {})
    if op is not None:
        monkeypatch.undo()
    return out["runs"][f"r{ROWS}"]["calls"]


@pytest.fixture(scope="module")
def clean(side):
    return _pass(side)


def _calls(calls, op):
    return [c for c in calls if c["op"] == op]


def test_a_clean_pass_reports_nothing(clean):
    assert len(clean) > 50
    assert all(not any(c["unwritten"].values()) and not c["outside_changed"] for c in clean)
    # the indexer's logits hold -inf past each row's context by contract; nothing else does
    assert {c["op"] for c in clean if any(c["nonfinite"].values())} == {"mla.index_logits"}


def test_the_gpus_path_records_what_the_cpus_does(side, clean, monkeypatch):
    monkeypatch.setattr(fingerprint, "TRITON_ON_CPU", True)
    assert _pass(side) == clean


def _at_last_call(clean, op, fault):
    """``fault(args)`` after the pass's last call of ``op`` only: what it leaves flows into the
    ops after it (a NaN through the router, say), never into an earlier call of ``op``."""
    n, seen = len(_calls(clean, op)), []

    def after(args):
        seen.append(1)
        if len(seen) == n:
            fault(args)
    return after


def _before(calls, clean, op):
    """The calls of ``calls`` before its last call of ``op``, and the same of ``clean``."""
    last = max(i for i, c in enumerate(calls) if c["op"] == op)
    return calls[:last], clean[:last], calls[last]


def test_an_unwritten_element_is_counted_in_its_call(side, clean, monkeypatch):
    def skip(args):
        args["out"].view(-1)[5] = float("nan")  # the poison the hook put there, left
    calls = _pass(side, monkeypatch, "moe.combine", _at_last_call(clean, "moe.combine", skip))
    before, clean_before, hit = _before(calls, clean, "moe.combine")
    assert hit["unwritten"]["out"] == 1 and hit["nonfinite"]["out"] == 0
    assert hit["outputs"]["out"] != _calls(clean, "moe.combine")[-1]["outputs"]["out"]
    assert before == clean_before  # every earlier call reports and records what it did


def test_a_non_finite_value_is_counted(side, clean, monkeypatch):
    def overflow(args):
        args["out"].view(-1)[0] = float("inf")
    calls = _pass(side, monkeypatch, "moe.combine", _at_last_call(clean, "moe.combine", overflow))
    before, clean_before, hit = _before(calls, clean, "moe.combine")
    assert hit["nonfinite"]["out"] == 1 and hit["unwritten"]["out"] == 0
    assert before == clean_before


def test_a_write_outside_the_state_view_is_named(side, clean, monkeypatch):
    def trespass(args):
        w = args["window"]
        w._base[ROWS].view(torch.int16).view(-1)[0] ^= 1  # the next request's window
    conv = _calls(_pass(side, monkeypatch, "kda.conv", trespass), "kda.conv")
    assert conv and all(c["outside_changed"] == ["window"] for c in conv)
    assert all(c["state"] == b["state"] for c, b in zip(conv, _calls(clean, "kda.conv")))


def test_one_flipped_bit_changes_the_calls_raw_digest_and_value_digest(side, clean, monkeypatch):
    def flip(args):
        args["y"].view(torch.int16).view(-1)[-1] ^= 1
    conv = _calls(_pass(side, monkeypatch, "kda.conv", flip), "kda.conv")
    clean_conv = _calls(clean, "kda.conv")
    assert conv[0]["outputs"]["y"][0] != clean_conv[0]["outputs"]["y"][0]
    assert conv[0]["outputs"]["y"][1] != clean_conv[0]["outputs"]["y"][1]
    assert not any(conv[0]["unwritten"].values())


def test_undefined_rows_of_an_output_are_not_judged(side, clean, monkeypatch):
    from kernels.k31.moe import reference

    def scribble(args):
        sh = side[0].shapes
        m = reference.moe_experts_defined(sh, args["ids"])
        args["y"][~m] = float("nan")  # rows another rank computes: not this call's work
    experts = _calls(_pass(side, monkeypatch, "moe.experts", scribble), "moe.experts")
    clean_experts = _calls(clean, "moe.experts")
    assert experts and all(c["unwritten"]["y"] == 0 for c in experts)
    assert [c["outputs"] for c in experts] == [c["outputs"] for c in clean_experts]


def test_the_band_pass_keeps_decoded_experts_of_the_ops_own_reference_module():
    """reference_extra finds the experts' decode cache where contracts.py's reference for
    moe.experts lives (kernels/k31/moe/reference.py), and only for a pass that puts it there."""
    from gates.side.tap import reference_extra
    from kernels.k31.moe import reference

    assert reference_extra(None) == {} and reference_extra({"mla.topk"}) == {}
    got = reference_extra({"moe.experts", "mla.topk"})
    assert set(got) == {"moe.experts"} and isinstance(got["moe.experts"]["decoded"], reference.DecodedExperts)
