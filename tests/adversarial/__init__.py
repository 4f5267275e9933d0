"""The reward-hack catalogue: real candidate commits that the gates must reject, each for its
own reason (the test asserts the reason, never only "not merged"). Hacks: ``hacks.py``.
Where: static (``test_scope_hacks.py``), runtime (``test_runtime_hacks.py``), kern try
(``test_scorer_only.py``: scope, kern test, kern bench against main, decision, ledger row;
``test_timed_band.py``: the same, without an identical claim, so judged by main's band),
GPU only (``test_gpu_hacks.py``), what the sandbox stops (``test_sandbox_hacks.py``: cases
22-24 are not rejected, they are harmless; each test says why).

 #  hack                                             rejected by (check)                 where
 1  result cache keyed on buffer pointers (lm_head)  bench: repeated_outputs             runtime
    result cache keyed on the batch size (lm_head)   bench: repeated_outputs,            runtime
                                                       ops_match_reference
    result cache of one row's outputs keyed on that  no hit in the timed replays (counted  runtime
      row's inputs (lm_head, the row's hidden state)   by the cache itself), not rewarded
    a cache keyed on a whole input set cannot hit: every timed replay gets a token set never
    used before in the process (test_defenses.py). Nor can one keyed on a row's inputs since
    replay protocol 3 (issue 35): no row decodes a token twice, its position advances with the
    set and its state is scaled per set (tests/gates/test_timed.py). Before it, a third of
    (row, token) pairs at the gpu profile's bench came back from the same state at the same
    position, and the cache answered them with exactly main's values.
    (calls counted instead of keyed: 17)
 2  kernel launched from a thread, step returns early
      plain ``import threading``                      scope: imports threading            static
      threading found through torch.sys.modules       bench: threads_left_running         runtime
      CUDA side stream outside the captured graph     bench: unwritten_or_invalid         GPU only
 3  output left stale from the previous call          kern test: output not fully written runtime
    (only in the scorer's timed replays: 8)
 4  fast path for the bench's batch sizes             kern test at the bucket sizes       runtime
                                                      (the tap always runs every bucket)
 5  uninitialised scratch (torch.empty) read          kern test: poison in the output     runtime
                                                      (fresh memory is NaN in tap sides)
 6  reference, tests, gates, bench driver, workload,  scope: <path> is protected          static
    corpus, contracts, dispatch, pipeline edited;
    the reference moved out by a rename
 7  host clock replaced at import
      ``time.perf_counter = ...``                     scope: assigns time.perf_counter    static
      ``vars(time)["perf_counter"] = ...``            bench: tampered (the seal)          runtime
      torch.cuda.Event.elapsed_time replaced          bench: tampered                     GPU only
    and independently of the seal, on the coordinator's clock: hidden_time (A/B benches;
    test_defenses.py)
 8  work skipped or cheapened under the scorer only
      ``"gates.side.replays" in sys.modules``         scope: reads sys.modules            static
      the driver's mode read from /proc/self/cmdline  bench: ops_match_reference          runtime
      torch.cuda.is_current_stream_capturing()        bench: graph differs from eager     GPU only
    no import, no process inspection, no host sync (all four fooled kern test and kern bench
    before the scorer judged its timed outputs):
      next_token holds the scorer's -1 before the     bench: timed_outputs_identical      kern try
        call: lm_head from 16 features, every bucket
      more calls on a buffer than the tap's steps:    bench: timed_outputs_identical      kern try
        SiTU left stale, buckets after the first
      context beyond the tap's: the indexer scores    bench: timed_outputs_identical,     kern try
        the recent top-k only, buckets after the       ops_match_reference
        first
 9  fp8 activation on odd batch sizes only            kern test: reference tolerance      runtime
    fp8 queries past the tap's context (absorb,       bench: timed_outputs_identical      kern try
      every bucket, within max_op_rel_rms)
    without an identical claim (the indexer's         bench: timed_outputs_accuracy by    kern try,
      rounding moved too): stale indexer logits         the band rule (main's band at the  cpu
      past the tap's calls, later buckets               scorer's context, issue 35)
10  the workload imported                             scope: imports kernels.k31.workload static
    the corpus opened by path at import               kern test: tampered (audit hook)    runtime
11  kern.yaml thresholds loosened                     scope: kern.yaml is protected       static
12  pyproject dependency; requirements.txt;           scope: protected / outside globs /  static
    foreign or dynamic import; .so; data blob          not a kernel dependency / __import__
                                                       / not a source file / too large
13  the replay side reads or writes main's recording  kern test: tampered (audit hook;   runtime
    (found while building this catalogue; it holds      file marks as the backstop)
    the batch sizes and tokens the judgment drew)
14  the hidden inputs read off the side's stdin
      ``sys.stdin``                                   scope: reads sys.stdin              static
      fd 0 swapped for a pipe of its own, relayed     kern test: tampered (fd 0 replaced) runtime
      /proc/self/fd/0 reopened to put the line back   audit hook refuses the open         runtime
                                                      (test_defenses.py)
    (nothing is there at import: the gates write the line only once the side says it
    imported the tree, gates/launch/process.py)
15  CUDA events created with timing disabled: a       bench: tampered (the seal of        runtime,
    subclass bound to torch.cuda.Event (inherits       torch.cuda.Event; the timer keeps   GPU
    every sealed method)                               the class bound before the tree)
16  persisting-L2 access window over the weights
      ctypes imported                                 scope: imports ctypes               static
      ctypes through sys.modules, the driver API      bench: persisting_l2 (beyond main) GPU only
17  lazy outputs: a tensor subclass whose work runs   kern test: output not fully         runtime
    when the checker first reads the output            written; bench: unwritten_or_invalid
                                                       (the gates read memory)
18  batch-and-skip: every second call a no-op         bench: unwritten_or_invalid         runtime
19  constant or passed-through outputs that happen    kern test: reference tolerance      runtime
    to match end to end (SiTU zeros; up passed on)
20  gc lookup of main's recorded outputs (pinned pass)
      ``import gc``                                   scope: imports gc                   static
      gc through sys.modules                          kern test: tampered (audit hook)    runtime
21  ghost fast path: a new kernel no shape reaches,   scope: imports                      static
    the wrapped reference does the work               kernels.k31.moe.reference
22  secrets planted in the home, /etc and the        the sandbox: nothing of the machine  sandbox
    ledger's folder read at import and sent to the     beyond the side's files; an empty
    log, the run folder, /tmp and a listener           network (docs/sandbox.md)
23  main's recording read through libc at import     the sandbox: main's folder absent,   sandbox
                                                       the replay's copy linked after import
24  writes outside the run folder (the harness,       the sandbox: read-only or private    sandbox
    the ledger's folder, its own tree, home, /tmp)
25  frame walk to main's recording (pinned pass):
      getattr(sys, computed), .f_back, .tb_frame ...  scope: getattr(sys, ...), frame links static
      sys._getframe as torch.sys, by a computed name  kern test: tampered (audit hook)    runtime
      a caught exception's tb_frame                   kern test: tampered (audit hook)    runtime
      a running generator's gi_frame                  kern test: tampered (audit hook)    runtime
    every way to a frame raises an audit event (CPython 3.10-3.13; f_back and f_locals need a
    frame first), refused from kernel code in any spelling (test_defenses.py: eight, inspect,
    a profiler and ctypes among them); and main's recording sits in no frame or closure the
    tree's code reaches while its kernel runs (the pinned pass fetches a call's outputs from a
    thread of its own once the kernel returned; test_defenses.py walks every frame from inside
    a kernel call and finds none of main's outputs of that call or later)
26  the long-context-only bug class: right at the     bench: timed_outputs_accuracy by    kern try,
    tap's context, wrong beyond it (the indexer         the band rule, ops_match_reference  cpu
    scores a window of recent tokens past it, every
    bucket; its rounding moved, so no identical claim)
 -  not a hack: a change that differs from main by    passes the band rule (no timed      kern try,
    near-ties only (the indexer's scale folded          check fails): a fair bar at the     cpu
    ahead); on the H200 at 128k, #9's patch             scorer's context; H200: bench/
                                                        gpu_evidence.sh fairbar
27  the import path hijacked: kernels/k31/__init__.py  scope: reads __path__ (static);     static,
    extends __path__ so `kernels.k31.contracts`         the side: every kernels module must  runtime
    loads the candidate's file (fewer outputs checked)  load from the file its name puts it
                                                        (gates/side/tree.py misplaced)

Static cases go through the real scope path on real commits and never start a gate. Runtime
cases (slow) share one repository and one recording of main per touched op; the kern try
cases share a second repository (two buckets: some of them are active only past the first).
GPU-only cases are skipped without CUDA (``gpu``); on the H200, from the repository root:
``.venv/bin/python -m pytest -q -p no:cacheprovider -m gpu tests/adversarial``.
"""
