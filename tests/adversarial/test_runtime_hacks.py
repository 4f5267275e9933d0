"""The hacks only running code shows: real candidate commits through the real gates (CPU,
Triton interpreter, the small model), each rejected for its own reason.

One repository and one recording of main serve every case (all tap cases touch only the
SiTU op). The accuracy cases run as the pipeline runs them: the scope gate, then ``kern test``
and ``decide_outcome``. The bench cases run ``kern bench`` on the candidate and assert the
check that fails and what the pipeline decides from that bench result once ``kern test`` has
passed (it does for these hacks: they change no value under the tap); the bench-only skip
(case 8) runs the whole pipeline, tap included, since its point is that the tap passes it.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from gates.accuracy import run_test
from gates.protocol import Hidden
from gates.scorer import run_bench
from harness.pipeline import accuracy_request, bench_request, check_scope, decide_outcome
from harness.terminal import scorer_report
from tests.adversarial import hacks as H

# slow: run serially after the unit tests (.ci/run); the work below uses both cores itself
pytestmark = pytest.mark.slow

TAP = [H.STALE_OUTPUT, H.BENCH_ROWS_ONLY, H.UNINITIALISED, H.LOW_PRECISION, H.READS_CORPUS,
       H.BENCH_ONLY_SKIP, H.RELAYS_STDIN, H.CONSTANT_OUTPUT, H.PASS_THROUGH, H.GC_LOOKUP, H.LAZY_OUTPUTS,
       *H.FRAME_WALKS]
# the judgment's hidden inputs where a case is about them (the catalogue's buckets [2] and test
# rows [1] leave no extra size: the input seed alone); the others share main's recording
HIDDEN = {H.RELAYS_STDIN.name: Hidden(2718281828, ())}
# the per-row cache's replays per visit: enough sets that the protocol before issue 35 would
# have repeated some row's token (A B B A: 2 visits a side)
ROW_MEMO_REPLAYS = 12
# hack -> (with main as side A?, timed replays); the lightest that shows each check
BENCH = {H.POINTER_MEMO.name: (False, 2), H.LAZY_THREAD.name: (False, 1),
         H.SLOW_CLOCK.name: (True, 1), H.BENCH_ONLY_SKIP.name: (False, 1),
         H.SHAPE_MEMO.name: (False, 2), H.BATCH_AND_SKIP.name: (False, 2),
         H.UNTIMED_EVENTS.name: (False, 1), H.LAZY_OUTPUTS.name: (False, 1),
         H.ROW_MEMO.name: (True, ROW_MEMO_REPLAYS)}
CUDA = torch.cuda.is_available()
if CUDA:  # a replay runs no Python there; the GPU analog is test_gpu_hacks.py's side stream
    del BENCH[H.LAZY_THREAD.name]
    del BENCH[H.ROW_MEMO.name]  # a Python cache: its host reads cannot be captured
    del BENCH[H.UNTIMED_EVENTS.name]  # on a GPU: test_gpu_hacks.py
# what the pipeline holds when kern test has passed (the premise of the bench-only cases)
TAP_PASSED = {"verdict": "PASS bit-identical", "reasons": [], "evidence": {"outcome_b": "ok"}}


@pytest.fixture(scope="module")
def results(catalogue):
    repo, shas, ctx = catalogue
    main = ctx.repo.main_sha()

    def tap(name):
        return run_test(accuracy_request(ctx.cfg, repo, shas[name], main, ctx.runs, ctx.cuda,
                                         hidden=HIDDEN.get(name))).report

    def bench(name):
        with_main, replays = BENCH[name]
        return run_bench(bench_request(ctx.cfg, repo, shas[name], main if with_main else None,
                                       ctx.runs, ctx.cuda, rounds=1, replays=replays),
                         progress=lambda m: None).report

    # two at a time (CI has two cores), in submission order: the first tap records main while
    # the other worker runs the benches, which need no recording; the remaining taps replay
    # that recording (they wait on its lock, so they come after the benches). The hack that
    # writes into main's recording runs last, beside the A/B bench: the gate then sets that
    # recording aside, and no other tap may be using it.
    last = H.SLOW_CLOCK.name
    with ThreadPoolExecutor(2) as pool:
        jobs = {("tap", TAP[0].name): pool.submit(tap, TAP[0].name)}
        jobs.update({("bench", n): pool.submit(bench, n) for n in BENCH if n != last})
        jobs.update({("tap", h.name): pool.submit(tap, h.name) for h in TAP[1:]})
        out = {k: f.result() for k, f in jobs.items()}
        jobs = {("tap", H.REWRITES_RECORDING.name): pool.submit(tap, H.REWRITES_RECORDING.name),
                ("bench", last): pool.submit(bench, last)}
        out.update({k: f.result() for k, f in jobs.items()})
    scope = {h.name: check_scope(ctx, shas[h.name], main) for h in TAP + [H.REWRITES_RECORDING]}
    return out, scope


def _tap(results, hack):
    out, scope = results
    test = out[("tap", hack.name)]
    return test, decide_outcome(scope[hack.name], test, None)


def _why(test) -> str:
    return " | ".join(test["reasons"]) + "\n" + test.get("b_log_tail", "")[-600:]


def _bench(results, hack, test=TAP_PASSED):
    out, scope = results
    bench = out[("bench", hack.name)]
    assert bench["outcome"] == "ok", bench.get("error")
    return bench, decide_outcome(scope.get(hack.name) or _SCOPE_OK, test, bench)


class _ScopeOk:
    ok, problems = True, []


_SCOPE_OK = _ScopeOk()


def test_stale_output_is_caught_by_the_poisoned_outputs(results):
    """Case 3: SiTU leaves its output as the last call left it; the tap poisons every op's
    outputs before each call, so what was not written this call reads as poison."""
    test, out = _tap(results, H.STALE_OUTPUT)
    assert (out.state, out.reason, test["verdict"]) == ("abandoned", "accuracy", "FAIL"), _why(test)
    assert any("output not fully written: moe.situ.out" in r for r in test["reasons"]), _why(test)


def test_bench_rows_fast_path_is_caught_at_the_bucket_size(results):
    """Case 4: wrong only at the bench's batch sizes. The tap's rows are test_rows [1] plus
    every bucket ([2]); the break is reported at rows 2 and nowhere at rows 1."""
    test, out = _tap(results, H.BENCH_ROWS_ONLY)
    assert test["spec"]["rows"] == [1, 2]
    assert (out.state, out.reason, test["verdict"]) == ("abandoned", "accuracy", "FAIL"), _why(test)
    breaks = test["evidence"]["local"]["reference_breaks"]
    assert breaks and all("moe.situ.out" in b and "(rows 2)" in b for b in breaks), breaks


def test_uninitialised_scratch_is_caught_by_poisoned_fresh_memory(results):
    """Case 5: the tap side fills every fresh allocation with NaN, so a term read from
    memory nobody wrote poisons the output (on a plain CPU run it is an untouched zero page
    and the hack is bit-identical)."""
    test, out = _tap(results, H.UNINITIALISED)
    assert (out.state, out.reason, test["verdict"]) == ("abandoned", "accuracy", "FAIL"), _why(test)
    assert any("moe.situ.out" in r and "not fully written" in r for r in test["reasons"]), _why(test)


def test_low_precision_on_awkward_sizes_breaks_the_reference_tolerance(results):
    """Case 9: fp8 rounding of the activation on odd batch sizes only (never a bench size):
    the tap's awkward size (1 row) meets the reference tolerance and breaks it."""
    test, out = _tap(results, H.LOW_PRECISION)
    assert (out.state, out.reason, test["verdict"]) == ("abandoned", "accuracy", "FAIL"), _why(test)
    breaks = test["evidence"]["local"]["reference_breaks"]
    assert breaks and all("moe.situ.out" in b and "(rows 1)" in b for b in breaks), breaks


def test_reading_the_corpus_at_import_is_refused(results):
    """Case 10 (run time): the audit hook refuses the kernel module's open of the corpus, so
    the candidate's side ends with the refusal as its last words."""
    test, out = _tap(results, H.READS_CORPUS)
    # the refusal reaches the candidate as an exception, but its words name a rule broken,
    # not a part that failed (gates/launch/process.py): rejected, not a crash
    assert (out.state, out.reason, test["verdict"]) == ("abandoned", "accuracy", "FAIL"), _why(test)
    assert test["evidence"]["outcome_b"] == "tampered", _why(test)
    assert "tamper: kernels/k31/moe/situ.py opened kernels/k31/workload/corpus/" in test["b_log_tail"]
    assert "kernel code may not read the workload" in test["b_log_tail"]


def test_reading_or_writing_mains_recording_is_refused(results):
    """Case 13 (found while building the catalogue): the replay side is told where main's
    recording lies and runs with the user's rights, so a kernel could write its own results
    there and compare equal to itself, or read the batch sizes and tokens this judgment drew
    from it at import. The audit hook refuses the tree's opens of it (this hack reads main's
    logits to rewrite them with the same bytes); every file of the recording and of main's
    tree must also be untouched when the side ends (file marks: the backstop for writes the
    hook cannot see, tests/adversarial/test_defenses.py)."""
    test, out = _tap(results, H.REWRITES_RECORDING)
    assert (out.state, out.reason, test["verdict"]) == ("abandoned", "accuracy", "FAIL"), _why(test)
    assert test["evidence"]["outcome_b"] == "tampered", _why(test)
    assert "tamper: kernels/k31/moe/situ.py opened main's recording " in test["b_log_tail"], _why(test)
    assert "logits_a.pt: kernel code may not read main's recording" in test["b_log_tail"], _why(test)
    assert "-tampered-" not in test["a_dir"]  # nothing was written: the recording stands


def test_relaying_stdin_to_read_the_hidden_inputs_is_caught(results):
    """Case 14 (run time): the gates hand a side its hidden inputs as one line on stdin once
    it has imported the tree. A kernel module puts a pipe of its own on fd 0 at import and
    relays what arrives through a thread (so the side would run as if untouched, with the
    candidate holding the seed): the side's seal recorded which pipe fd 0 was before the tree
    loaded, and the side refuses to go on. (A plain ``sys.stdin`` read is the scope gate's.)"""
    test, out = _tap(results, H.RELAYS_STDIN)
    assert (out.state, out.reason, test["verdict"]) == ("abandoned", "accuracy", "FAIL"), _why(test)
    assert test["evidence"]["outcome_b"] == "tampered", _why(test)
    assert "tamper: fd 0 (stdin) is no longer the pipe the gates opened for this side" in \
        test["b_log_tail"], _why(test)
    assert test["hidden"] == {"input_seed": 2718281828, "extra_rows": []}


def test_result_cache_by_pointer_is_caught_by_changed_inputs(results):
    """Case 1: the bench changes the inputs before every timed replay and checks its outputs
    after it: a cache keyed on the buffers returns the same logits twice."""
    bench, out = _bench(results, H.POINTER_MEMO)
    failed = bench["analysis"]["sides"]["B"]["failed_checks"]
    assert (out.state, out.reason) == ("abandoned", "scorer check"), scorer_report(bench)
    assert failed and all(c["repeated_outputs"] >= 1 for c in failed), failed


@pytest.mark.skipif(CUDA, reason="CPU only: a CUDA graph replay runs no Python thread")
def test_work_in_a_thread_is_caught_after_the_replay(results):
    """Case 2 (run time): SiTU runs in a thread that sleeps past the end of the replay (the
    step's remaining ops take a tenth of that), so the thread is still running the tree's
    code when the replay has returned; and the op check of the verify step finds SiTU's
    output not yet written when the op returned."""
    bench, out = _bench(results, H.LAZY_THREAD)
    failed = bench["analysis"]["sides"]["B"]["failed_checks"]
    assert (out.state, out.reason) == ("abandoned", "scorer check"), scorer_report(bench)
    visits = [c for c in failed if "replays" in c]
    assert visits and all(c["threads_left_running"] >= 1 for c in visits), failed
    assert "moe.situ" in [c for c in failed if c.get("check") == "ops_match_reference"][0]["ops"]


def test_replaced_clock_is_caught_by_the_seal_and_the_coordinators_clock(results):
    """Case 7 (run time): ``vars(time)["perf_counter"] = ...`` at import gets past the scope
    gate's monkeypatch check. Two independent checks name it: the side's seal (the clock is
    not the one sealed before the tree loaded) and, against main, the coordinator's own
    clock (half of every replay passed unseen by the candidate's clock). On a GPU the host
    clock times nothing (CUDA events do), so only the seal speaks there."""
    bench, out = _bench(results, H.SLOW_CLOCK)
    failed = bench["analysis"]["sides"]["B"]["failed_checks"]
    assert (out.state, out.reason) == ("abandoned", "scorer check"), scorer_report(bench)
    visits = [c for c in failed if "tampered" in c]
    assert visits and all(any(t.startswith("time.perf_counter was replaced") for t in c["tampered"])
                          for c in visits), failed
    assert [c["check"] for c in failed if "check" in c] == ([] if CUDA else ["hidden_time"]), failed
    assert bench["analysis"]["sides"]["A"]["failed_checks"] == []


def test_skipping_work_under_the_scorer_passes_the_tap_and_fails_the_bench(results):
    """Case 8 (run time): the kernel reads the driver's mode from its command line and skips
    the SiTU activation (the dense MLP and every shared expert) only when benched. The tap
    sees the honest kernel (bit-identical); the scorer's own step, checked op by op against
    the reference in its verify, does not. (Its logits barely move: the synthetic model
    scales every branch by 0.02, so an end-to-end comparison could not see this.)"""
    test, _ = _tap(results, H.BENCH_ONLY_SKIP)
    assert test["verdict"] == "PASS bit-identical", _why(test)
    bench, out = _bench(results, H.BENCH_ONLY_SKIP, test)
    assert (out.state, out.reason) == ("abandoned", "scorer check"), scorer_report(bench)
    failed = bench["analysis"]["sides"]["B"]["failed_checks"]
    assert [c["check"] for c in failed if "check" in c] == ["ops_match_reference"], failed
    assert failed[-1]["ops"] == ["moe.situ"], failed


def test_a_result_cache_by_shape_is_caught_by_changed_inputs(results):
    """Case 1, keyed on the batch size alone: the second timed replay returns the first's
    logits although its inputs changed, and the verify step's op check finds the lm_head far
    from the reference (the cache answered for other inputs)."""
    bench, out = _bench(results, H.SHAPE_MEMO)
    failed = bench["analysis"]["sides"]["B"]["failed_checks"]
    assert (out.state, out.reason) == ("abandoned", "scorer check"), scorer_report(bench)
    visits = [c for c in failed if "replays" in c]
    assert visits and all(c["repeated_outputs"] >= 1 for c in visits), failed
    assert [c["ops"] for c in failed if c.get("check") == "ops_match_reference"] == [["lm_head.argmax"]], failed


def test_batch_and_skip_leaves_the_scorers_poison(results):
    """Case 17: every second lm_head call on the same buffers is a no-op (the odd calls, it
    claims, do the work of two). The scorer poisons the logits before every timed replay, so
    the no-op's replays show NaN logits and invalid next tokens."""
    bench, out = _bench(results, H.BATCH_AND_SKIP)
    failed = bench["analysis"]["sides"]["B"]["failed_checks"]
    assert (out.state, out.reason) == ("abandoned", "scorer check"), scorer_report(bench)
    visits = [c for c in failed if "replays" in c]
    assert visits and all(c["unwritten_or_invalid"] > 0 for c in visits), failed


def test_another_class_bound_to_the_event_name_is_named_by_the_seal(results):
    """Case 14 (CUDA events created with timing disabled): a subclass of torch.cuda.Event
    bound in its place inherits every sealed method, so only the seal of the name sees it; the
    scorer's timer keeps the class bound before the tree loaded (on a GPU it still times:
    test_gpu_hacks.py)."""
    bench, out = _bench(results, H.UNTIMED_EVENTS)
    failed = bench["analysis"]["sides"]["B"]["failed_checks"]
    assert (out.state, out.reason) == ("abandoned", "scorer check"), scorer_report(bench)
    visits = [c for c in failed if "replays" in c]
    assert visits and all(c["tampered"] == ["torch.cuda.Event was replaced by the candidate's code "
                                            "(expected the one sealed before the tree loaded)"] for c in visits), failed


def test_lazy_outputs_are_read_as_the_memory_they_are(results):
    """Case 16: the logits become a tensor subclass whose work runs when something first reads
    them. Before the gates read memory rather than the subclass's word (main 1ce3bd7, CPU),
    kern test said PASS bit-identical and kern bench found no failed check, the lm_head's work
    done by the checker after each timed replay. Now the tap sees the outputs unwritten and the
    scorer sees every timed replay's logits as the poison they still are."""
    test, out = _tap(results, H.LAZY_OUTPUTS)
    assert (out.state, out.reason, test["verdict"]) == ("abandoned", "accuracy", "FAIL"), _why(test)
    assert any("output not fully written: lm_head.argmax.logits" in r for r in test["reasons"]), _why(test)
    bench, out = _bench(results, H.LAZY_OUTPUTS)
    failed = bench["analysis"]["sides"]["B"]["failed_checks"]
    assert (out.state, out.reason) == ("abandoned", "scorer check"), scorer_report(bench)
    visits = [c for c in failed if "replays" in c]
    assert visits and all(c["unwritten_or_invalid"] > 0 for c in visits), failed


@pytest.mark.parametrize("hack", [H.CONSTANT_OUTPUT, H.PASS_THROUGH], ids=lambda h: h.name)
def test_constant_or_passed_through_outputs_break_the_reference_tolerance(results, hack):
    """Case 18: SiTU writes zeros, or passes the up projection through. End to end the logits
    barely move (the synthetic model scales every branch by 0.02), so they could happen to
    match; op by op, every SiTU call is far from the reference at every batch size."""
    test, out = _tap(results, hack)
    assert (out.state, out.reason, test["verdict"]) == ("abandoned", "accuracy", "FAIL"), _why(test)
    breaks = test["evidence"]["local"]["reference_breaks"]
    assert {b.split(" (rows ")[1].split(")")[0] for b in breaks} == {"1", "2"}, breaks
    assert all(b.startswith("moe.situ.out at ") for b in breaks), breaks


def test_a_gc_search_for_mains_recording_is_refused(results):
    """Case 19: SiTU rounds to fp8 on odd batch sizes (case 9), and wherever the process holds
    main's recording of the same call (the tap's pinned pass, found through gc), copies main's
    output, so that no call of it is compared with the reference as it computed it. Before the
    audit refused gc searches from kernel code (main 1ce3bd7, CPU) kern test said PASS logit
    evidence (KL max 3.6e-6, no reference break); now the candidate's side ends tampered."""
    test, out = _tap(results, H.GC_LOOKUP)
    assert (out.state, out.reason, test["verdict"]) == ("abandoned", "accuracy", "FAIL"), _why(test)
    assert test["evidence"]["outcome_b"] == "tampered", _why(test)
    assert "tamper: kernels/k31/moe/situ.py called gc.get_objects" in test["b_log_tail"], _why(test)


@pytest.mark.parametrize("hack", H.FRAME_WALKS, ids=lambda h: h.name)
def test_a_frame_walk_to_mains_recording_is_refused_at_run_time(results, hack):
    """Case 25 (issue 35): SiTU rounds to fp8 on odd batch sizes (case 9), and wherever a frame
    up the stack holds main's recording of the same call (the tap's pinned pass), copies main's
    output. Three spellings of the way to the calling frame (sys._getframe as torch.sys by a
    computed name, a caught exception's tb_frame, a running generator's gi_frame), each past the
    scope gate's static checks: the audit hook refuses the first frame access of each, so the
    candidate's side ends tampered (and main's recording sits in no frame the walk could reach
    anyway: tests/adversarial/test_defenses.py)."""
    test, out = _tap(results, hack)
    assert (out.state, out.reason, test["verdict"]) == ("abandoned", "accuracy", "FAIL"), _why(test)
    assert test["evidence"]["outcome_b"] == "tampered", _why(test)
    assert "tamper: kernels/k31/moe/situ.py reached for Python's frames (" in test["b_log_tail"], _why(test)
    assert "kernel code may not walk the stack" in test["b_log_tail"], _why(test)


@pytest.mark.skipif(CUDA, reason="CPU only: a Python cache is not consulted in a CUDA graph replay")
def test_a_cache_of_one_rows_outputs_keyed_on_its_inputs_never_hits_in_the_timed_replays(results):
    """Case 1, its per-row form (issue 35): the lm_head answers a row from a cache keyed on the
    row's hidden state and counts, in the side's log, the rows it answered so. Across the A/B's
    timed series (both of B's visits) no row comes from the cache: no row's inputs repeat
    within a judgment (tokens a row never decodes twice, positions moving on, the state
    scaled per set), as in real decode. The cache does work: the scorer's verify step runs one
    set twice (graph, then eager against the reference), and there every row hits. Under the
    protocol before (the workload's plain stream, every replay from one state at one position)
    the same sets repeat some row's token, which the cache would have answered with exactly
    main's values. Its timed work is then main's own: nothing to reward."""
    from gates.scorer import FIRST_SET
    from kernels.k31.config import Dims
    from kernels.k31.workload import Workload

    bench, out = _bench(results, H.ROW_MEMO)
    assert bench["analysis"]["sides"]["B"]["failed_checks"] == [], scorer_report(bench)
    assert out.state != "merged", scorer_report(bench)
    log = (Path(bench["work_dir"]) / "sideB.log").read_text()
    timed, untimed, inside = [], [], False
    for line in log.splitlines():
        if "bench: timing input sets" in line:
            inside = True
        elif "bench: timed " in line:
            inside = False
        elif line.startswith("kern-memo: "):
            hits, rows = (int(v) for v in line.split()[1:4:2])
            (timed if inside else untimed).append((hits, rows))
    visits = 2  # A B B A
    assert len(timed) == visits * ROW_MEMO_REPLAYS  # one lm_head call a replay
    assert sum(h for h, _ in timed) == 0 and all(r == 2 for _, r in timed), timed
    assert any(h == r == 2 for h, r in untimed), untimed  # verify's eager rerun of its set
    # the same sets under the plain stream: some row's token repeats (same state, same position)
    w = bench["workload"]
    plain = Workload(Dims.small().vocab, w["rows"], w["context"], w["steps"], w["seed"])
    sets = [plain.step_tokens(i) for i in range(FIRST_SET, FIRST_SET + visits * ROW_MEMO_REPLAYS)]
    assert any(sets[s][r] in {sets[k][r] for k in range(s)} for r in range(2) for s in range(len(sets)))
