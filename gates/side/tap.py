"""The accuracy gate's tap, run inside one side's subprocess.

Role ``record`` (side A, the base): for every batch size of the tap and every decode step,
run the step eagerly with every op's outputs poisoned first; after each op call hash its
outputs (raw bytes and values, over the rows it defines), its state views and the part of
each state tensor outside the view, and count unwritten elements. For the ops the diff
touches, also keep full copies (activation inputs, outputs, state after) up to a snapshot
budget. Save every step's logits.

Role ``noise`` (side A again, only when B is not bit-identical to the recording: a
bit-identical candidate never pays for it; once per main commit, touched ops and spec, on the
target's visible seed): a free pass, the same again from the restored state (the noise floor:
is A reproducible?), then once more with the touched ops on the protected reference (the band).

Role ``record`` keeps its process after the free pass: the kept copies of the touched ops'
calls are written only when the candidate's pass differs from this one (the coordinator asks
then), and the device is given back meanwhile.

Role ``replay`` (side B, the candidate): the same free run (hashes and logits: bit identity
and end to end); if anything differs, a pinned pass where every recorded call of A gets A's
inputs, runs B's kernel inside guard bands, is compared with A's outputs and with the
protected reference, and is then overwritten with A's outputs so that later calls stay on
A's trajectory (cut-local).

Weights and state tensors are never copied: they are identical on both sides by construction
(protected seeded generation, verified by hash) and state stays identical under pinning.
Everything written is measurement; the verdict is made by the harness.
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import torch

from .fingerprint import raw_hash
from ..protocol import TapFiles, TapOptions, tap_rows
from .numerics import _is_big, compare, poison, unwritten, written_rows
from .clock import clock
from .session import Side, Spec, environment, log

GUARD = 256  # elements of canary on each side of a guarded output
RAW_READS = torch._C.DisableTorchFunctionSubclass  # bound before the tree loads (see TapHook)
CANARY = 0xA5


# ------------------------------------------------------------------ helpers
def _storage_ptrs(model) -> set[int]:
    """Storages of weights and state: arguments living there are never copied."""
    ptrs = set()
    w = model.weights
    objs = [w.embed, w.lm_head, *w.mix, *w.attn, *w.mlp]
    for o in objs:
        ts = [o] if isinstance(o, torch.Tensor) else list(vars(o).values())
        for t in ts:
            if isinstance(t, torch.Tensor):
                ptrs.add(t.untyped_storage().data_ptr())
    for _, t in model.state.tensors():
        ptrs.add(t.untyped_storage().data_ptr())
    return ptrs


def _is_bulk(t, ptrs) -> bool:
    return t.untyped_storage().data_ptr() in ptrs


def outside_rows(t: torch.Tensor) -> torch.Tensor | None:
    """The part of ``t``'s base tensor past a ``[:rows]`` view (None when ``t`` is no such
    view): a kernel writing there writes state that is not its own."""
    base = t._base
    if base is None or base.shape[1:] != t.shape[1:] or not base.is_contiguous():
        return None
    if t.data_ptr() != base.data_ptr() or t.shape[0] >= base.shape[0]:
        return None
    return base[t.shape[0]:]


def _outside_hash(t: torch.Tensor) -> str | None:
    rest = outside_rows(t)
    return None if rest is None else raw_hash(rest)


def _masks(spec, sh, args):
    return spec.defined(sh, args) if spec.defined else {}


def _combined(hashes) -> str:
    return hashlib.sha256("|".join(hashes).encode()).hexdigest()[:24]


def weights_hash(model) -> str:
    w = model.weights
    parts = [raw_hash(w.embed), raw_hash(w.lm_head)]
    seen = set()
    for o in [*w.mix, *w.attn, *w.mlp]:
        if id(o) in seen:
            continue
        seen.add(id(o))
        parts += [raw_hash(t) for t in vars(o).values() if isinstance(t, torch.Tensor)]
    return _combined(parts)


def state_hash(model) -> str:
    return _combined(f"{k}={raw_hash(t)}" for k, t in model.state.tensors())


class CallLog:
    """One pass's per-call measurements."""

    def __init__(self):
        self.calls = []

    def add(self, **kw):
        self.calls.append(kw)


class TapHook:
    """Dispatcher hook of a free pass: poison, run, hash; optionally keep full copies."""

    def __init__(self, side: Side, keep: set | None, budget_bytes: float, store: dict,
                 run_key: str, key: tuple[int, int] | None = None):
        self.side, self.keep, self.budget, self.store = side, keep, budget_bytes, store
        self.ptrs = _storage_ptrs(side.model)
        self.log = CallLog()
        self.used = 0.0
        self.run_key = run_key
        self.budget_hit = False
        from .fingerprint import Pending

        self.pending = Pending(side.device, tap_key(side) if key is None else key)
        self._settled = 0

    def __call__(self, spec, site, args, run):
        # the tap reads what the outputs' memory holds, not what a tensor subclass of the
        # candidate's says (its __torch_function__ could do the op's work when the tap reads:
        # lazy outputs); never around run(): the candidate must not tell checked from timed
        with RAW_READS():
            kept, outside, big_before = self._before(spec, args)
        run()
        with RAW_READS():
            self._after(spec, site, args, kept, outside, big_before)

    def _before(self, spec, args):
        for name in spec.outputs:
            poison(args[name])
        want = self.keep is None or spec.name in self.keep
        index = len(self.log.calls)
        kept = None
        if want and not self.budget_hit:
            inputs = {k: args[k].clone() for k in spec.inputs
                      if isinstance(args.get(k), torch.Tensor) and not _is_bulk(args[k], self.ptrs)}
            kept = {"inputs": inputs}
        pend = self.pending
        outside = {k: _outside(args[k], pend) for k in spec.state}
        big_before = {k: args[k].clone() for k in spec.state if _is_big(args[k])} \
            if kept is not None else {}
        return kept, outside, big_before

    def _after(self, spec, site, args, kept, outside, big_before):
        sh, pend = self.side.shapes, self.pending
        index = len(self.log.calls)
        masks = _masks(spec, sh, args)
        entry = {"i": index, "op": spec.name, "site": site, "outputs": {}, "state": {},
                 "unwritten": {}, "nonfinite": {}, "outside": {}}
        for name in spec.outputs:
            # one fused check: digests over the defined rows, poison and Inf counted there
            t = args[name]
            i = pend.check(t, masks.get(name))
            entry["outputs"][name] = entry["unwritten"][name] = i
            if t.dtype.is_floating_point:
                entry["nonfinite"][name] = i
        for name in spec.state:
            entry["state"][name] = pend.check(args[name], counts=False)
            if outside[name] is not None:
                entry["outside"][name] = (outside[name], _outside(args[name], pend))
        if kept is not None:
            kept["outputs"] = {k: args[k].clone() for k in spec.outputs}
            kept["state"] = {k: args[k].clone() for k in spec.state if not _is_big(args[k])}
            kept["big_state"] = {k: written_rows(v, args[k]) for k, v in big_before.items()}
            size = sum(_nbytes(v) for part in kept.values() for v in part.values())
            if self.used + size > self.budget:
                self.budget_hit = True
            else:
                self.used += size
                self.store[(self.run_key, index)] = kept
                entry["kept"] = True
        self.log.add(**entry)

    def settle(self) -> None:
        """Read every queued digest and count back in one sync and fill in the entries."""
        vals = self.pending.resolve()
        for e in self.log.calls[self._settled:]:
            e["outputs"] = {k: (vals[i].raw, vals[i].value) for k, i in e["outputs"].items()}
            e["state"] = {k: (vals[i].raw, vals[i].value) for k, i in e["state"].items()}
            e["unwritten"] = {k: vals[i].unwritten for k, i in e["unwritten"].items()}
            e["nonfinite"] = {k: vals[i].nonfinite for k, i in e["nonfinite"].items()}
            e["outside_changed"] = [k for k, (a, b) in e.pop("outside").items()
                                    if vals[a].raw != vals[b].raw]
        self._settled = len(self.log.calls)


def tap_key(side: Side) -> tuple[int, int]:
    """The key of this side's tap digests: from the judgment's hidden input seed (the target
    seed without one), so A's and B's sides hash alike and no judgment's key is another's."""
    from .fingerprint import digest_key

    return digest_key(side.workload.seed)


def unrecorded_checks(checks, spec, sh, args):
    """The pinned pass's checks of a call with no recording, one by one (each read back at
    once; a caller may stop at the first that differs from A's): ("outputs", name, Check) over
    the rows each output defines, then ("state", name, Check) of each whole state view."""
    masks = _masks(spec, sh, args)
    for n in spec.outputs:
        yield "outputs", n, checks.now(args[n], masks.get(n))
    for n in spec.state:
        yield "state", n, checks.now(args[n])


# the compile side's digest key: no judgment's (a judgment's is a blake2b draw of its hidden
# input seed, ``fingerprint.digest_key``); a key is a kernel argument, never in Triton's cache
COMPILE_KEY = (0, 0)


def compile_checks(side: Side, rows: int) -> tuple[set, object]:
    """One step of ``rows`` rows through the tap's own hooks, keyed by :data:`COMPILE_KEY`:
    a free pass's checks of every op call (:class:`TapHook`) and a pinned pass's checks of a
    call with no recording (:func:`unrecorded_checks`), so Triton compiles every variant of
    the check kernel (``fingerprint.Variant``) a tap of this build launches (main's compile
    side, ``gates/side/driver.py``). Returns those variants and the step."""
    from .fingerprint import Pending

    hook = TapHook(side, set(), 0.0, {}, f"r{rows}", key=COMPILE_KEY)
    pinned = Pending(side.device, COMPILE_KEY)

    def both(spec, site, args, run):
        hook(spec, site, args, run)
        for _ in unrecorded_checks(pinned, spec, side.shapes, args):
            pass

    step = side.step(rows, hook=both)
    side.set_inputs(step, 0)
    step.run()
    hook.settle()
    side.sync()
    return hook.pending.variants | pinned.variants, step


def variants_doc(variants) -> list[dict]:
    """The check kernel's variants a side launched, sorted, as its document holds them."""
    import dataclasses

    return [dataclasses.asdict(v) for v in sorted(variants)]


def _outside(t: torch.Tensor, pend) -> int | None:
    """Queued raw digest of ``outside_rows(t)``."""
    rest = outside_rows(t)
    return None if rest is None else pend.check(rest, values=False, counts=False)


def _nbytes(v) -> float:
    if isinstance(v, torch.Tensor):
        return v.numel() * v.element_size()
    if isinstance(v, tuple):
        return sum(_nbytes(x) for x in v)
    return 0.0


# ------------------------------------------------------------------ passes
class ReferenceFor:
    """Wraps a tap hook: the named ops run on the protected reference instead of the tree's
    kernels (the 'same model, other rounding' band of the touched ops)."""

    def __init__(self, names: set, inner, extra: dict | None = None):
        from kernels.k31.dispatch import as_kernel

        self.names, self.inner, self._as_kernel = names, inner, as_kernel
        self.log = inner.log
        self.extra = extra or {}  # op -> keywords its reference takes beyond the contract

    def __call__(self, spec, site, args, run):
        if spec.name in self.names:
            ref = self._as_kernel(spec, **self.extra.get(spec.name, {}))
            sh = self.inner.side.shapes
            return self.inner(spec, site, args, lambda: ref(sh, **args))
        return self.inner(spec, site, args, run)

    def __setattr__(self, k, v):
        if k == "run_key":
            self.inner.run_key = v
        object.__setattr__(self, k, v)


class ReferenceOps:
    """Step hook: the named ops run on the protected reference, every other op as the tree's
    kernel (the scorer's band pass on main's side, ``gates/side/replays.py``)."""

    def __init__(self, names: set, shapes):
        from kernels.k31.dispatch import as_kernel

        self.names, self.shapes, self._as_kernel = set(names), shapes, as_kernel
        self.extra = reference_extra(self.names)
        self.refs: dict = {}  # op name -> its reference in the kernel convention

    def __call__(self, spec, site, args, run):
        if spec.name not in self.names:
            return run()
        ref = self.refs.get(spec.name)
        if ref is None:
            ref = self.refs[spec.name] = self._as_kernel(spec, **self.extra.get(spec.name, {}))
        ref(self.shapes, **args)


def reference_extra(reference_ops: set | None) -> dict:
    """Keywords the references of ``reference_ops`` take beyond their contract, for one pass:
    every moe.experts call of the pass on the reference decodes its experts' weights once for
    the pass, not per call (main's side only: never a cache a candidate reaches). The cache
    class stands in the module of the op's reference, wherever the tree keeps it (a tree
    without one decodes per call)."""
    if not reference_ops or "moe.experts" not in reference_ops:
        return {}
    import importlib

    from kernels.k31 import contracts

    module = importlib.import_module(contracts.op("moe.experts").reference.__module__)
    decoded = getattr(module, "DecodedExperts", None)
    return {"moe.experts": {"decoded": decoded()}} if decoded is not None else {}


def free_pass(side: Side, runs: list[int], steps: int, snap, keep, budget, store,
              reference_ops: set | None = None) -> dict:
    """All runs and steps; per call hashes, per step logits. Restores state between runs."""
    out = {"runs": {}, "logits": {}, "check_variants": set()}
    used = 0.0  # the budget bounds the kept copies of the whole pass, not of each run
    extra = reference_extra(reference_ops)
    for rows in runs:
        side.model.state.restore(snap)
        key = f"r{rows}"
        hook = TapHook(side, keep, budget, store, key)
        hook.used = used
        if reference_ops:
            hook = ReferenceFor(reference_ops, hook, extra)
        step = side.step(rows, hook=hook)
        base_hook = hook.inner if reference_ops else hook
        for s in range(steps):
            side.set_inputs(step, s)
            hook.run_key = f"{key}s{s}"
            step.run()
            base_hook.settle()
            logits = step.logits
            if side.spec.world > 1:  # every rank's vocabulary share, so any layout compares
                from .rank import rank_digests

                logits = side.comm.gather_shares(step.logits)
                d = rank_digests(side, step, logits)
                out.setdefault("rank_digests", {})[f"{rows}:{s}"] = \
                    f"{d['replicated_sha']}-{d['logits_sha']}"
            out["logits"][f"{rows}:{s}"] = logits.detach().float().cpu().clone()
        side.sync()
        base = hook.inner if reference_ops else hook
        out["runs"][key] = {"calls": base.log.calls, "kept_bytes": base.used - used,
                            "budget_hit": base.budget_hit}
        used = base.used
        out["check_variants"] |= base.pending.variants
        log(f"tap: rows {rows}: {len(hook.log.calls)} op calls")
    side.model.state.restore(snap)
    return out


def any_rank(side: Side, flag: bool) -> bool:
    """Whether ``flag`` holds on some rank: a decision every rank must take alike, or their
    steps' collectives would pair different calls."""
    if side.spec.world == 1:
        return flag
    import torch.distributed as dist

    t = torch.tensor([int(flag)], device=side.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def side_main(opts: TapOptions, device: str, outdir: Path, rank: int = 0, receive=lambda: None,
              channel=None, publish=None) -> dict:
    """One tap side. ``receive()``: its hidden inputs (``gates.protocol.Hidden``, handed over
    on stdin; None: none): the workload's input seed, and batch sizes run after the spec's
    visible ones; called once the model is built (it follows the target seed alone), so the
    candidate's side builds while main's records (gates/accuracy.py) and its time waiting for
    them is a ``wait`` span (``hand_over`` in the document: its phases until then).
    ``channel`` (``gates/side/channel.Channel``): the coordinator's lines after the hand-over
    (main's kept op calls on demand: :func:`_keep_on_demand`); ``publish(result)``: writes the
    side's document before it ends (main's record side, so the candidate can replay against it
    while this process waits)."""
    role = opts.role
    spec = Spec.of(opts)
    clk = clock()
    # leased: the store's weights attached, a state of its own built ("attach"); else built
    with clk.span("attach" if opts.attach else "build"):
        side = Side(spec, device, rank=rank, attach_weights=opts.attach, attach_sha256=opts.attach_sha256)
    with clk.span("wait"):  # the candidate's side: until main's side recorded (gates/accuracy.py)
        hidden = receive()
    hand_over = clk.phases().to_dict()
    side.use_input_seed(hidden.input_seed if hidden else None)
    files = TapFiles(outdir).rank(rank)
    files.root.mkdir(parents=True, exist_ok=True)
    # a base on another layout (kern test --base-gpus): no op call of B corresponds to one of
    # A's, so nothing is kept for pinning and B is judged by its logits alone
    cross = bool(opts.cross_layout)
    # every run starts from the whole initial state (caches included), so a run's hashes do
    # not depend on which runs came before it
    snap = side.model.state.snapshot()
    runs, steps = tap_rows(opts.rows, [], hidden.extra_rows if hidden else ()), int(opts.steps)
    if max(runs) > side.max_rows:
        raise ValueError(f"tap: batch size {max(runs)} of the hidden inputs exceeds the side's "
                         f"{side.max_rows} rows: they were drawn for another profile (expected "
                         f"1 .. the largest bucket)")
    t0 = time.monotonic()
    result = {"environment": environment(side.device), "role": role, "spec": opts.sent,
              "build_s": side.build_s, "weights_hash": weights_hash(side.model),
              "state_hash": state_hash(side.model), "rows": runs,
              "workload": side.workload.describe(), "hand_over": hand_over}
    if role == "record":
        keep = set() if cross else None if opts.touched is None else set(opts.touched)
        store: dict = {}
        with clk.span("tap"):
            first = free_pass(side, runs, steps, snap, keep, opts.budget_mb * 2**20, store)
        result["check_variants"] = variants_doc(first.pop("check_variants"))
        with clk.span("save"):
            torch.save(first.pop("logits"), files / TapFiles.LOGITS_A)
        result["rank_digests"] = first.pop("rank_digests", None)
        result["pass"] = first
        result["wall_s"] = time.monotonic() - t0
        del snap
        result["kept_saved"] = _keep_on_demand(side, store, files / TapFiles.KEPT_A, channel,
                                               lambda: publish(result))
    elif role == "noise":
        # asked for only when B is not bit-identical to main, once per main, touched ops and
        # spec (gates/accuracy.py's band_inputs: on the target's visible seed): A, A again
        # from the restored state (is A reproducible?), then the band; each pass's wall
        # (``passes_s``: which of them the noise side's tap span went to)
        laps = [time.monotonic()]
        with clk.span("tap"):
            plain = free_pass(side, runs, steps, snap, set(), 0, {})
        plain.pop("check_variants")
        with clk.span("save"):
            torch.save(plain.pop("logits"), files / TapFiles.LOGITS_A)
        plain.pop("rank_digests", None)
        result["pass"] = plain
        laps.append(time.monotonic())
        with clk.span("tap"):
            repeat = free_pass(side, runs, steps, snap, set(), 0, {})
        repeat.pop("check_variants")
        with clk.span("save"):
            torch.save(repeat.pop("logits"), files / TapFiles.LOGITS_A2)
        result["repeat"] = repeat
        laps.append(time.monotonic())
        # the band: A with the touched ops on the reference (all ops when unknown)
        ref_ops = None if opts.touched is None else set(opts.touched)
        if ref_ops is None:
            from kernels.k31 import contracts

            ref_ops = set(contracts.OPS)
        if ref_ops:
            with clk.span("tap"):
                band = free_pass(side, runs, steps, snap, set(), 0, {}, reference_ops=ref_ops)
            band.pop("check_variants")
            with clk.span("save"):
                torch.save(band.pop("logits"), files / TapFiles.LOGITS_AREF)
            result["band_ops"] = sorted(ref_ops)
            laps.append(time.monotonic())
        result["passes_s"] = {name: b - a for name, a, b in zip(("plain", "repeat", "band"), laps, laps[1:])}
    else:
        with clk.span("tap"):
            free = free_pass(side, runs, steps, snap, set(), 0, {})
        result["check_variants"] = variants_doc(free.pop("check_variants"))
        with clk.span("save"):
            torch.save(free.pop("logits"), files / TapFiles.LOGITS_B)
        result["rank_digests"] = free.pop("rank_digests", None)
        free = json.loads(json.dumps(free))  # the same form as A's recording (lists, not tuples)
        result["pass"] = free
        if not cross:
            main = TapFiles(Path(opts.record))
            record = json.loads(main.document(TapFiles.RECORD, rank, spec.world).read_text())
            result["same_setup"] = (record["weights_hash"] == result["weights_hash"]
                                    and record["state_hash"] == result["state_hash"])
            if any_rank(side, _differs(record["pass"], free) and result["same_setup"]):
                with clk.span("wait"):  # main's side writing them
                    _ask_for_kept(channel)
                # never a local of this frame; main's side kept them in host memory
                kept = KeptCalls(main.rank(rank) / TapFiles.KEPT_A, side.device)
                try:
                    with clk.span("tap"):
                        result["pinned"] = pinned_pass(side, runs, steps, snap, record["pass"], kept,
                                                       opts, seed=hidden.input_seed if hidden else opts.seed)
                finally:
                    kept.close()
    result.setdefault("wall_s", time.monotonic() - t0)  # main's record side: its pass's
    return result


def _keep_on_demand(side: Side, store: dict, path: Path, channel, publish) -> bool:
    """Main's record side, once its document and logits are written: publish them, give the
    device back (the kept op calls move to this process's host memory, the model goes: the
    candidate's side, built beside this one's pass, replays on it), say so, and write the kept calls to ``path`` only
    if the coordinator asks (the candidate's free pass differed from this recording: its pinned
    pass reads them); a bit-identical candidate's judgment never writes them. True when saved."""
    from ..protocol import KEEP_SAVE, RECORDED, SAVED

    clk = clock()
    with clk.span("save"):
        for key, kept in store.items():
            store[key] = {part: {k: _to_host(v) for k, v in d.items()} for part, d in kept.items()}
        side.model, side._inputs = None, None
        import gc

        gc.collect()
        if side.device.type == "cuda":
            torch.cuda.empty_cache()
    publish()
    channel.say(RECORDED)
    log(f"tap: recorded; {len(store)} op calls kept in memory until the candidate's pass is known")
    with clk.span("wait"):
        word = channel.wait("the gates' word on main's kept op calls")
    if word != KEEP_SAVE:  # KEEP_DROP, or the coordinator closed the pipe: nothing to keep
        return False
    with clk.span("save"):
        torch.save(store, path)
    channel.say(SAVED)
    with clk.span("wait"):  # until the replay has ended and the coordinator has checked that
        channel.wait("the gates' word that the replay ended")  # it left this recording as it was
    return True


def _to_host(v):
    if isinstance(v, torch.Tensor):
        return v.cpu()
    if isinstance(v, tuple):
        return tuple(_to_host(x) for x in v)
    return v


def _ask_for_kept(channel) -> None:
    """The replay's free pass differs from main's: ask the coordinator for main's kept op
    calls (main's side writes them now) and wait until they are in the recording's folder."""
    from ..protocol import KEPT_READY, WANT_KEPT

    said = channel.ask(WANT_KEPT, "the gates' answer on main's kept op calls")
    if said != KEPT_READY:
        raise RuntimeError(f"environment: main's side did not hand over its kept op calls (the "
                           f"gates answered {said}, expected {KEPT_READY}): the base side's log "
                           f"says why")


def _differs(a: dict, b: dict) -> bool:
    for key, run in a["runs"].items():
        other = b["runs"].get(key)
        if other is None or len(other["calls"]) != len(run["calls"]):
            return True
        for x, y in zip(run["calls"], other["calls"]):
            if x["outputs"] != y["outputs"] or x["state"] != y["state"]:
                return True
    return False


def reference_picks(a_calls: list, per_op: int, seed: str) -> set | None:
    """Pure: which of a run's recorded calls (indices into ``a_calls``) the pinned pass also
    checks against the reference: ``per_op`` of each op's kept calls drawn with ``seed`` (all of
    an op's when it has fewer); None (every call) when ``per_op`` is 0."""
    if per_op <= 0:
        return None
    import random

    by_op: dict = {}
    for i, c in enumerate(a_calls):
        if c.get("kept"):
            by_op.setdefault(c["op"], []).append(i)
    picked = set()
    for op, idx in sorted(by_op.items()):
        picked |= set(idx if len(idx) <= per_op else random.Random(f"{seed}/{op}").sample(idx, per_op))
    return picked


class KeptCalls:
    """Main's kept op calls (``TapFiles.KEPT_A``) for the pinned pass, held by a thread of
    their own: :meth:`inputs` hands out a call's recorded inputs before B's kernel runs,
    :meth:`after` its recorded outputs and state once the kernel returned, each part once.

    Why: B's kernel runs inside the pass, and the tree's code can reach what the pass holds
    (a frame walk, or the hook's closure through the step it is given). So nothing the pass's
    thread holds while a kernel runs is main's output of that call or of a later one: they
    live in the serving thread's own frame (started with ``_thread``: no ``threading`` hook a
    candidate set runs in it; the audit refuses other threads' frames), and a part asked for
    twice means something took it before the pass did (``TamperError``)."""

    def __init__(self, path: Path, device):
        import _thread
        import queue

        self._ask, self._got = queue.Queue(), queue.Queue()
        _thread.start_new_thread(_serve_kept, (str(path), device, self._ask, self._got))
        self.keys = self._reply()  # frozenset of (run key, call index): names only

    def _reply(self):
        ok, value = self._got.get()
        if not ok:
            raise value
        return value

    def inputs(self, key: tuple) -> dict:
        """The recorded inputs of call ``key`` (``{name: tensor}``)."""
        self._ask.put(("inputs", key))
        return self._reply()

    def after(self, key: tuple) -> dict:
        """The recorded ``outputs``, ``state`` and ``big_state`` of call ``key``; ask only once
        B's kernel for it has returned."""
        self._ask.put(("after", key))
        return self._reply()

    def close(self) -> None:
        self._ask.put(None)


def _serve_kept(path: str, device, ask, got) -> None:
    """The serving thread of :class:`KeptCalls`: the recording is a local of this frame only
    (loaded onto ``device``: main's side saves it from host memory)."""
    from .tamper import TamperError

    try:
        store = torch.load(path, weights_only=False, map_location=device)
    except Exception as e:  # noqa: BLE001 - the pass raises it in its own thread
        got.put((False, e))
        return
    got.put((True, frozenset(store)))
    served = set()
    while True:
        asked = ask.get()
        if asked is None:
            return
        part, key = asked
        if (part, key) in served or key not in store:
            got.put((False, TamperError(
                f"tamper: main's recording of op call {key} ({part}) was asked for "
                f"{'twice' if (part, key) in served else 'but never kept'}: something took it "
                f"before the pinned pass did (kernel code reaching the gates' objects)")))
            continue
        served.add((part, key))
        if part == "inputs":
            got.put((True, store[key]["inputs"]))
        else:
            got.put((True, {k: store[key][k] for k in ("outputs", "state", "big_state")}))
            del store[key]  # used: its memory goes back as the pass moves on


def pinned_pass(side: Side, runs, steps, snap, record: dict, kept: KeptCalls, opts: TapOptions,
                seed=None) -> dict:
    """Cut-local: B's kernels on A's recorded inputs, compared with A (every call) and the
    reference (``opts.reference_calls_per_op`` calls of each op per batch size, drawn with
    ``seed``: the judgment's hidden input seed). A call's recorded outputs are fetched from
    ``kept`` only once B's kernel for it has returned."""
    from kernels.k31 import contracts
    from kernels.k31.dispatch import Ops

    from .fingerprint import Pending

    sh = side.shapes
    kernels = Ops(sh, "kernel")
    ptrs = _storage_ptrs(side.model)
    checks = Pending(side.device, tap_key(side))  # A's digests: the free pass's function
    results = []
    for rows in runs:
        side.model.state.restore(snap)
        key = f"r{rows}"
        a_calls = record["runs"][key]["calls"]
        state = {"i": 0, "diverged": None, "step": 0}
        referenced = reference_picks(a_calls, int(opts.reference_calls_per_op or 0),
                                     f"{seed}/{key}")

        def hook(spec, site, args, run):
            i = state["i"]
            state["i"] += 1
            if state["diverged"] is not None:
                run()
                return
            if i >= len(a_calls) or a_calls[i]["op"] != spec.name or a_calls[i]["site"] != site:
                state["diverged"] = {"call": i, "why": "op sequence differs from A",
                                     "b": f"{site} {spec.name}"}
                run()
                return
            a = a_calls[i]
            call = (f"{key}s{state['step']}", i)
            if call not in kept.keys:
                for name in spec.outputs:
                    poison(args[name])
                run()
                same = all(c.raw == a[part][n][0] for part, n, c in unrecorded_checks(checks, spec, sh, args))
                if not same:
                    state["diverged"] = {"call": i, "why": "an op without a recording differs "
                                         "(outside the snapshot budget, or an op the diff does "
                                         "not touch)", "b": f"{site} {spec.name}"}
                return
            for name, t in kept.inputs(call).items():
                args[name].copy_(t)
            state_before = {k: args[k].clone() for k in spec.state if not _is_big(args[k])}
            big_before = {k: args[k].clone() for k in spec.state if _is_big(args[k])}
            in_hash = {k: raw_hash(args[k]) for k in spec.inputs
                       if isinstance(args.get(k), torch.Tensor) and not _is_bulk(args[k], ptrs)}
            outside = {k: _outside_hash(args[k]) for k in spec.state}
            guarded, canaries = _guard(spec, args)
            run_args = {**args, **guarded}
            kernels.implementation(spec.name)(sh, **run_args)  # B's kernel
            for name, t in guarded.items():
                args[name].copy_(t)
            rec = kept.after(call)  # main's outputs of this call: only now in this thread
            entry = {"call": i, "op": spec.name, "site": site, "rows": rows,
                     "outputs": {}, "state": {}, "reference": {}, "wrote_inputs": [],
                     "guard_broken": _canaries_broken(canaries), "outside_changed": []}
            for k, h in in_hash.items():
                if raw_hash(args[k]) != h:
                    entry["wrote_inputs"].append(k)
            for k in spec.state:
                if outside[k] is not None and _outside_hash(args[k]) != outside[k]:
                    entry["outside_changed"].append(k)
            masks = _masks(spec, sh, args)
            for name in spec.outputs:
                entry["outputs"][name] = compare(rec["outputs"][name], args[name],
                                                 masks.get(name)).as_dict()
                entry["outputs"][name]["unwritten"] = unwritten(
                    args[name] if masks.get(name) is None else args[name][masks[name]])
            for name in spec.state:
                if name in rec["state"]:
                    entry["state"][name] = compare(rec["state"][name], args[name]).as_dict()
            b_written = {k: written_rows(v, args[k]) for k, v in big_before.items()}
            for name, (a_idx, a_rows) in rec["big_state"].items():
                b_idx, b_rows = b_written[name]
                if not torch.equal(a_idx.to(b_idx.device), b_idx):
                    entry["state"][name] = {"written_rows_differ": True, "a_rows": int(a_idx.numel()),
                                            "b_rows": int(b_idx.numel()), "differing": -1}
                else:
                    entry["state"][name] = compare(a_rows.to(b_rows.device), b_rows).as_dict()
            # the protected reference on the same inputs and state-before (a sample of each
            # op's calls per batch size: at full size one moe.experts reference costs more
            # than the rest of its call; every call is compared with A's above)
            if referenced is None or i in referenced:
                ref_args = {k: v for k, v in args.items() if k not in spec.outputs}
                for k, v in state_before.items():
                    ref_args[k] = v.clone()
                for k, v in big_before.items():
                    ref_args[k] = v  # the reference writes caches in place: give it the copy
                expected = contracts.op(spec.name).reference(sh, **ref_args)
                for name in spec.outputs:
                    entry["reference"][name] = compare(expected[name], args[name],
                                                       masks.get(name)).as_dict()
                for name in spec.state:
                    if name in state_before:
                        entry["reference"][name] = compare(expected[name], args[name]).as_dict()
                for name, (b_idx, b_rows) in b_written.items():
                    ref_rows = expected[name].reshape(-1, b_rows.shape[-1])[b_idx]
                    entry["reference"][name] = compare(ref_rows, b_rows).as_dict()
            results.append(entry)
            # pin: A's outputs and state after, so later calls see A's trajectory
            for name, t in rec["outputs"].items():
                args[name].copy_(t)
            for name, t in rec["state"].items():
                args[name].copy_(t)
            for name, (a_idx, a_rows) in rec["big_state"].items():
                args[name].copy_(big_before[name])
                args[name].reshape(-1, a_rows.shape[-1])[a_idx.to(a_rows.device)] = a_rows

        step = side.step(rows, hook=hook)
        for s in range(steps):
            state["step"] = s
            side.set_inputs(step, s)
            step.run()
        side.sync()
        if state["diverged"] is not None:
            state["diverged"]["rows"] = rows
            results.append({"diverged": state["diverged"]})
    side.model.state.restore(snap)
    return {"calls": results}


def _guard(spec, args):
    """Outputs replaced by views into larger buffers whose ends hold a canary pattern."""
    guarded, canaries = {}, []
    for name in spec.outputs:
        t = args[name]
        if not t.is_contiguous():
            continue
        flat = torch.empty(t.numel() + 2 * GUARD, dtype=t.dtype, device=t.device)
        flat.view(torch.uint8).fill_(CANARY)
        view = flat[GUARD:GUARD + t.numel()].view(t.shape)
        poison(view)
        guarded[name] = view
        canaries.append((name, flat))
    return guarded, canaries


def _canaries_broken(canaries) -> list[str]:
    broken = []
    for name, flat in canaries:
        raw = flat.view(torch.uint8)
        es = flat.element_size()
        head, tail = raw[:GUARD * es], raw[-GUARD * es:]
        if bool((head != CANARY).any()) or bool((tail != CANARY).any()):
            broken.append(name)
    return broken
