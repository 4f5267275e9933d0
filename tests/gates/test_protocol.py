"""The subprocess boundary (``gates/protocol.py``): every spec the loop builds parses into its
mode's options, a key no mode defines is an error that names it, and the tap's files have
one name each on both ends."""
from __future__ import annotations

from dataclasses import MISSING, fields
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gates import protocol as P
from gates.accuracy import base_spec, tap_spec
from gates.spec import side_spec
from harness.orchestrator import profile_spec
from harness.pipeline import accuracy_request
from harness.settings import load
from tests.gates.candidates import ROOT


@pytest.fixture(scope="module")
def kern():
    return load(ROOT / "kern.yaml").resolve(False)


def test_every_spec_the_loop_builds_parses_into_its_modes_options(kern):
    cfg, prof = kern, kern.machine
    req = accuracy_request(cfg, ROOT, "HEAD", "HEAD", ROOT / "runs", False)
    b = tap_spec(req)
    a = base_spec(b, 2, "tp2")
    for role, spec in (("record", {**a, "touched": ["moe.experts"]}), ("noise", {**a, "touched": None}),
                       ("replay", {**b, "record": "/r/tap/x", "cross_layout": True})):
        opts = P.parse("tap", {**spec, "role": role})
        assert opts.role == role and opts.rows == spec["rows"] and opts.sent == {**spec, "role": role}
    assert P.parse("tap", {**a, "role": "record"}).world == 2
    bench = side_spec(cfg.target, prof, rows=list(prof.buckets), steps=40, layout=prof.layout, world=1)
    assert P.parse("store", bench).rows == list(prof.buckets)
    assert P.parse("bench", {**bench, "attach": "/x.ipc"}).attach == "/x.ipc"
    run = profile_spec(cfg.target, prof, False)
    opts = P.parse("run", run)
    assert (opts.replays, opts.profile_rows, opts.free) == (5, run["profile_rows"], False)
    gpu = P.parse("run", profile_spec(cfg.target, prof, True))  # a GPU's carries the leave-one-out column
    assert (gpu.profile_rows, gpu.rows, bool(gpu.free)) == (128, [128], True)
    step = side_spec(cfg.target, prof, context=64, steps=1, rows=[1, 3], replays=None, profile_rows=0,
                     ref_rows=0, state_dtype=None)
    assert P.parse("run", {**step, "layout": "tp2", "world": 2}).world == 2


@given(mode=st.sampled_from(sorted(P.OPTIONS)), key=st.text("abcdefghij_", min_size=1, max_size=12))
def test_a_key_no_mode_defines_is_an_error_that_names_it_and_who_acts(mode, key):
    cls = P.OPTIONS[mode]
    spec = {"model": "small", "layout": "tp1", "seed": 1, "weight_sets": 1, "context": 8, "steps": 1,
            "rows": [1]}
    if mode == "tap":
        spec.update(role="replay", budget_mb=0, reference_calls_per_op=0)
    assert P.parse(mode, spec) == cls.parse(spec)
    known = {f for f in cls.__dataclass_fields__ if f != "sent"}
    if key in known:
        return
    with pytest.raises(P.OptionsError) as e:
        P.parse(mode, {**spec, key: 1})
    assert key in str(e.value) and cls.__name__ in str(e.value) and "bug of the gate" in str(e.value)


def test_missing_options_a_bad_role_and_an_unknown_mode_are_errors():
    with pytest.raises(P.OptionsError, match="was not sent rows, which RunOptions requires"):
        P.parse("run", {"model": "small", "layout": "tp1", "seed": 1, "weight_sets": 1, "context": 8,
                        "steps": 1})
    spec = {"model": "small", "layout": "tp1", "seed": 1, "weight_sets": 1, "context": 8, "steps": 1,
            "rows": [1], "budget_mb": 0, "reference_calls_per_op": 0}
    with pytest.raises(P.OptionsError, match="role 'pin'"):
        P.parse("tap", {**spec, "role": "pin"})
    with pytest.raises(P.OptionsError, match="no side mode 'fast'"):
        P.parse("fast", spec)


def test_the_taps_files_on_one_process_and_on_ranks():
    f = P.TapFiles(Path("/r/tap/main-1"))
    assert [p.name for p in f.recording()] == ["record.json", "kept_a.pt", "logits_a.pt", "noise.json",
                                               "logits_a2.pt", "logits_aref.pt"]
    assert f.record == Path("/r/tap/main-1/record.json") and f / P.TapFiles.LOGITS_B == f.root / "logits_b.pt"
    assert f.rank(0) == f and f.rank(2).root == Path("/r/tap/main-1/rank2")
    assert f.document(P.TapFiles.RECORD, 0, 1) == f.record
    assert f.document(P.TapFiles.RECORD, 0, 2) == Path("/r/tap/main-1/record.rank0.json")
    # rank r's part of main's recording: its document as the launcher names it, its tensors
    assert f.recording(1, 2)[0] == Path("/r/tap/main-1/record.rank1.json")
    assert [p.parent.name for p in f.recording(1, 2)[1:]] == ["rank1"] * len(P.TapFiles.RECORDING)


def test_recorded_needs_the_document_and_the_kept_calls(tmp_path):
    f = P.TapFiles(tmp_path)
    assert not f.recorded
    f.record.write_text("{}")
    assert not f.recorded
    (f / P.TapFiles.KEPT_A).write_bytes(b"")
    assert f.recorded


# ------------------------------------------------------------------ the scorer's commands
def _example(cls):
    """One instance of each command with every field set to a value of its kind."""
    values = {"hidden": {"input_seed": 7, "extra_rows": [5]}, "sketch_seed": 3, "claim": "PASS bit-identical",
              "bucket": 4, "n": 2, "first": 9, "path": "/w/timed-B-01.pt", "mine": "memory",
              "theirs": ["/w/timed-B-01.pt"], "near_tie_factor": 4.0, "sample": {"rows": 8, "seed": 1},
              "ops": True, "kind": "compile", "band": {"ops": ["mla.index_logits"], "kl_pass": 1e-4},
              "attach_sha256": "ab" * 32}
    return cls(**{f.name: values[f.name] for f in fields(cls)})


@pytest.mark.parametrize("cls", sorted(P.COMMANDS.values(), key=lambda c: c.CMD), ids=lambda c: c.CMD)
def test_every_command_crosses_the_pipe_as_itself(cls):
    import json

    c = _example(cls)
    line = json.dumps(c.to_dict())
    assert json.loads(line)["cmd"] == cls.CMD and P.command(json.loads(line)) == c
    # the fields a caller may leave out take their defaults on the side's end too
    required = {f.name: getattr(c, f.name) for f in fields(cls)
                if f.default is MISSING and f.default_factory is MISSING}
    assert P.command({"cmd": cls.CMD, **required}) == cls(**required)


def test_a_command_the_side_does_not_know_is_an_error_that_names_the_scorer():
    with pytest.raises(P.CommandError, match="unknown command 'fly'.*bug of the scorer"):
        P.command({"cmd": "fly"})
    with pytest.raises(P.CommandError, match="unknown command None"):
        P.command({"bucket": 1})
    with pytest.raises(P.CommandError, match="'time' command takes bucket, n, first; it was sent "
                                             "rows other field.*lacks n: a bug of the scorer"):
        P.command({"cmd": "time", "bucket": 2, "rows": 3})


def test_the_hand_over_line_carries_the_hidden_inputs_or_none():
    h = P.Hidden(2718281828, (5, 6))
    assert P.read_handover(P.handover_line(h.to_dict()).encode()) == h
    assert P.read_handover(P.handover_line(None)) is None
    with pytest.raises(P.HiddenError, match="hand-over line: input_seed"):
        P.read_handover('{"hidden": {"input_seed": -1, "extra_rows": []}}\n')
    assert P.tap_rows([1, 3], [2, 4], (5, 3)) == [1, 3, 5, 2, 4]
