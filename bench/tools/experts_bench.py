"""Device tool (issue 14): moe.experts, the tree's kernel against a baseline copy of it, on the
full model's own MXFP4 weights and real-text routing, in one process.

    python3 bench/tools/experts_bench.py --baseline DIR --out $OUT/experts.json --commit SHA
        [--rows 16,32,64,128,256] [--sets 8] [--rounds 4] [--replays 10] [--budget-s 330]
        [--sweep default|none] [--model full --layout published]

``DIR`` holds the baseline's ``experts.py`` and ``tunables.py`` (e.g. ``git show
1ce3bd7:kernels/k31/moe/experts.py``); it is loaded as a sibling module of the tree's
``kernels/k31/moe`` (it shares group.py, activation.py, scratch), with its own tunables.

What it does:

1. Builds the side the scorer builds (kern.yaml's gpu profile: model, layout, context, seed,
   weight sets; ``gates.side.session.Side``) and runs one eager step per row count with a
   dispatcher hook that records every ``moe.experts`` call's ``x`` and ``ids`` (the router's
   real-text choices) and its layer's weights. Then it drops the decode state.
2. Per row count, ``--sets`` MoE layers spread over the model are the input sets. Checks, on
   the first set: the tree's kernel against the baseline and against the protected reference
   (rel RMS, max ulp, elements differing over the pairs this rank computes; every such row
   written; the reference at the smallest and largest row count only, it is slow); every
   swept tile configuration against the tree's default (expected bit-identical).
3. Times, per row count, one CUDA graph per variant that runs the op on all sets back to
   back (so consecutive calls stream different experts, several GB apart: nothing stays in
   L2), replayed ``--replays`` times per visit in alternating orders over ``--rounds``
   rounds; the median replay over the sets is the time per call. Bytes per call are the op's
   roofline formula (kernels/k31/moe/roofline.py: touched experts' w1/s1/w2/s2, x rows, y
   rows, ids) averaged over the sets; bandwidth is bytes over time, also as a percentage of
   the card's read ceiling measured in this run (gates.side.ceiling.read_ceiling).
4. Per kernel, on the default and the baseline (every variant at ``--breakdown-rows``):
   torch.profiler over a few replays (device time of each kernel name per call), to show where
   the op's time goes.

The sweep (``--sweep default``) varies one knob family at a time from the tree's tunables
(K tiles per step, pipeline stages, tile widths, block_m, the grouping's pair chunk);
configurations the tunables do not allow are skipped. ``--budget-s`` stops the sweep (not the checks or the baseline and
default timings) once that many seconds have passed, and the JSON says what was skipped.

Writes one JSON document to ``--out`` (rewritten after every row count, so a run cut short
keeps what it measured) with the environment (GPU, driver, torch, triton, CUDA), the commit
given, the read bandwidth, and per row count the checks, the times and the kernel
breakdown; prints a table last. Exits 1 if a check failed.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

T0 = time.monotonic()

# one knob family at a time, from the tree's default (names are ExpertTiles fields)
SWEEP = (
    {"fc1_k_tiles": 1}, {"fc1_k_tiles": 4}, {"fc1_k_tiles": 4, "fc1_num_stages": 2},
    {"fc1_num_stages": 1}, {"fc1_num_stages": 2}, {"fc1_num_stages": 4},
    {"fc2_k_tiles": 1}, {"fc2_num_stages": 1}, {"fc2_num_stages": 2}, {"fc2_num_stages": 4},
    {"fc1_block_n": 64}, {"fc2_block_n": 128},
    {"block_m": 32},
    {"group_block_p": 512}, {"group_block_p": 1024},
)
# bit-identical results are expected across tile choices; this is the check's tolerance
# against the baseline and the reference (the op's accuracy-gate tolerance, kern.yaml default)
REL_RMS_LIMIT = 1.0e-2


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ decisions (pure)
def median_per_call(samples_ms: list[float], calls: int) -> float:
    """Median milliseconds per op call from replays of a graph holding ``calls`` calls."""
    return statistics.median(samples_ms) / calls


def visit_orders(variants: list[str], rounds: int) -> list[list[str]]:
    """Alternating forward and reversed orders (A B C, C B A, ...), so that no variant is
    always first or last after another one."""
    return [list(variants) if r % 2 == 0 else list(reversed(variants)) for r in range(rounds)]


def allowed(tiles: dict, choices: dict) -> bool:
    """Whether every value of a configuration is among its tunable's declared choices."""
    return all(v in choices.get(f"moe.experts.{k}", (v,)) for k, v in tiles.items())


def config_name(overrides: dict) -> str:
    return "default" if not overrides else ",".join(f"{k}={v}" for k, v in sorted(overrides.items()))


def bandwidth_row(bytes_per_call: float, ms: float, read_bps: float | None) -> dict:
    gbps = bytes_per_call / (ms * 1e-3) / 1e9
    return {"ms": ms, "GBps": gbps, "pct_of_read_bw": (100.0 * gbps * 1e9 / read_bps) if read_bps else None}


def table(result: dict) -> str:
    bw = result.get("read_bandwidth_Bps") or 0
    pct = lambda row: f"{row['pct_of_read_bw']:6.1f}" if row["pct_of_read_bw"] is not None else "     -"  # noqa: E731
    lines = [f"read ceiling {bw / 1e12:.2f} TB/s (gates.side.ceiling.read_ceiling, this run)",
             f"{'rows':>5} {'touched':>7} {'MB/call':>8} {'base ms':>8} {'base %':>6} "
             f"{'new ms':>7} {'new %':>6} {'speedup':>7}  best sweep (ms, %)"]
    for rows, b in result["buckets"].items():
        t = b.get("times", {})
        base, new = t.get("baseline"), t.get("default")
        if not base or not new:
            continue
        best = min(((k, v) for k, v in t.items() if k != "baseline"), key=lambda kv: kv[1]["ms"])
        lines.append(f"{rows:>5} {b['touched_mean']:7.1f} {b['bytes_per_call'] / 1e6:8.1f} "
                     f"{base['ms']:8.3f} {pct(base)} {new['ms']:7.3f} {pct(new)} "
                     f"{base['ms'] / new['ms']:7.2f}  {best[0]} ({best[1]['ms']:.3f}, {pct(best[1]).strip()})")
    return "\n".join(lines)


# ------------------------------------------------------------------ the shell
def load_baseline(folder: Path):
    """The baseline experts module (a sibling of the tree's, sharing its helpers) and its
    default tiles, read from the baseline's tunables literal."""
    import kernels.k31.moe  # noqa: F401  the package the baseline's relative imports resolve in

    name = "kernels.k31.moe._experts_baseline"
    spec = importlib.util.spec_from_file_location(name, folder / "experts.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    scope: dict = {}
    exec(compile((folder / "tunables.py").read_text(), str(folder / "tunables.py"), "exec"), scope)
    table_ = scope["TUNABLES"]
    fields = mod.ExpertTiles.__dataclass_fields__
    tiles = mod.ExpertTiles(**{f: table_[f"moe.experts.{f}"][0] for f in fields})
    return mod, tiles


class ExpertsCalls:
    """Dispatcher hook: records every moe.experts call's inputs (copies of x and ids, the
    layer's weights by reference) and runs every op as usual."""

    def __init__(self):
        self.calls = []

    def __call__(self, spec, site, args, run):
        if spec.name == "moe.experts":
            rec = {k: args[k] for k in ("w1", "s1", "w2", "s2")}
            rec.update(x=args["x"].clone(), ids=args["ids"].clone(), site=site)
            self.calls.append(rec)
        run()


def capture_inputs(side, rows_list: list[int]) -> dict[int, list[dict]]:
    out = {}
    for rows in rows_list:
        hook = ExpertsCalls()
        step = side.step(rows, hook=hook)
        side.set_inputs(step, 0)
        t = time.monotonic()
        step.run()
        side.sync()
        log(f"rows {rows}: eager step with the hook {time.monotonic() - t:.1f}s, "
            f"{len(hook.calls)} moe.experts calls")
        out[rows] = hook.calls
        del step
    return out


def pick_sets(calls: list[dict], n: int) -> list[dict]:
    idx = sorted({round(i * (len(calls) - 1) / max(1, n - 1)) for i in range(n)})
    return [calls[i] for i in idx]


def graph_of(fn, device):
    """A CUDA graph of ``fn`` (run twice eagerly first: compiles, allocates scratch); on the
    CPU (a mechanics check of this tool) ``fn`` itself."""
    if device.type != "cuda":
        fn()
        return fn
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        fn()
        fn()
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize(device)
    return HeldGraph(g, fn)


class HeldGraph:
    """A captured graph and the function it was captured from. The graph replays raw pointers to
    the tensors ``fn`` closes over (inputs, poisoned outputs), so it holds ``fn`` and they live
    as long as it: op_bench's loop used to drop them after capture, the allocator handed their
    memory to the next variant's tensors, and replays wrote there ('an illegal memory access',
    on the H200 2026-12-03 and the H100 2026-12-06)."""

    def __init__(self, graph, fn):
        self.graph, self.fn = graph, fn

    def replay(self) -> None:
        self.graph.replay()


def time_graphs(graphs: dict, rounds: int, replays: int) -> dict[str, list[float]]:
    samples = {k: [] for k in graphs}
    for order in visit_orders(list(graphs), rounds):
        for name in order:
            g = graphs[name]
            if callable(g):  # CPU mechanics check: host clock, one call
                t = time.perf_counter()
                g()
                samples[name].append((time.perf_counter() - t) * 1e3)
                continue
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(replays)]
            g.replay()  # one untimed replay per visit: the previous variant's tail drains
            for s, e in ev:
                s.record()
                g.replay()
                e.record()
            torch.cuda.synchronize()
            samples[name] += [s.elapsed_time(e) for s, e in ev]
    return samples


def kernel_breakdown(graph, replays: int, calls: int) -> dict:
    """Device ms per op call of each kernel name in ``graph`` (torch.profiler, CUPTI)."""
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(replays):
                graph.replay()
            torch.cuda.synchronize()
        out = {}
        for ev in prof.key_averages():
            dev_us = getattr(ev, "device_time_total", None)
            if dev_us is None:
                dev_us = getattr(ev, "cuda_time_total", 0.0)
            if dev_us and ev.key and not ev.key.startswith("ProfilerStep"):
                out[ev.key] = dev_us / 1e3 / replays / calls
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))
    except Exception as e:  # the profiler is a report, never a reason to lose the timings
        return {"error": f"{type(e).__name__}: {e}"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="experts_bench")
    ap.add_argument("--baseline", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--rows", default="16,32,64,128,256")
    ap.add_argument("--sets", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=330.0)
    ap.add_argument("--sweep", choices=("default", "none"), default="default")
    ap.add_argument("--breakdown-rows", type=int, default=128,
                    help="the row count at which every variant gets a per-kernel breakdown")
    ap.add_argument("--model", default=None, help="default: kern.yaml's machine profile's")
    ap.add_argument("--layout", default=None)
    ap.add_argument("--context", type=int, default=None)
    args = ap.parse_args(argv)

    from gates.side.numerics import compare, poison, unwritten
    from gates.side.session import Side, Spec, environment
    from gates.side.ceiling import read_ceiling
    from gates.spec import side_spec
    from harness import settings as hsettings
    from kernels.k31.moe import reference as ref
    from kernels.k31 import tunables
    from kernels.k31.moe import experts
    from kernels.k31.moe.roofline import experts as experts_cost

    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    if not cuda:
        log("no CUDA device: a mechanics check on the CPU profile (times mean nothing)")
        args.rounds, args.replays = 1, 1
    rows_list = [int(r) for r in args.rows.split(",")]
    st = hsettings.load(ROOT / "kern.yaml")
    cfg = st.resolve(cuda)
    fields = {"rows": rows_list, "steps": 1}
    for k in ("model", "layout", "context"):
        if getattr(args, k) is not None:
            fields[k] = getattr(args, k)
    spec = Spec.from_dict(side_spec(cfg.target, cfg.machine, **fields))
    result = {"meta": {"date": time.strftime("%Y-%m-%d"), "commit": args.commit,
                       "tool": "bench/tools/experts_bench.py", "argv": sys.argv[1:],
                       "baseline": str(args.baseline)},
              "environment": environment(dev), "spec": dataclasses.asdict(spec),
              "kern_yaml_sha256_16": st.digest, "buckets": {}, "skipped": []}
    ceiling = read_ceiling(dev)
    result["read_ceiling"] = ceiling
    # the key keeps its name for the table; since 2026-12-03 it holds the read ceiling
    result["read_bandwidth_Bps"] = bw = ceiling["ceiling_Bps"] if ceiling else None
    log(f"read ceiling {bw / 1e12:.3f} TB/s" if bw else "read ceiling: none on the CPU")

    base_mod, base_tiles = load_baseline(args.baseline)
    result["baseline_tiles"] = dataclasses.asdict(base_tiles)
    default = experts.ExpertTiles.from_tunables()
    result["default_tiles"] = dataclasses.asdict(default)
    choices = {k: v[1] for k, v in tunables.table().items()}
    sweep = [o for o in SWEEP if allowed(o, choices)] if args.sweep == "default" else []

    side = Side(spec, str(dev))
    sh = side.shapes
    inputs = capture_inputs(side, rows_list)
    side.model.state = None  # the decode state (most of the memory) is not needed any more
    if cuda:
        torch.cuda.empty_cache()
    failed = []

    def save():
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1, default=str))

    for rows in rows_list:
        sets = pick_sets(inputs[rows], args.sets)
        ys = [torch.empty(rows * sh.dims.top_k, sh.dims.latent, dtype=torch.bfloat16, device=dev)
              for _ in sets]
        costs = [experts_cost(sh, {**s, "y": y}) for s, y in zip(sets, ys)]
        masks = [ref.moe_experts_defined(sh, s["ids"]) for s in sets]
        touched = [int(torch.unique(s["ids"].reshape(-1)[m]).numel()) for s, m in zip(sets, masks)]
        entry = {"sites": [s["site"] for s in sets], "touched": touched,
                 "touched_mean": statistics.mean(touched),
                 "local_pairs_mean": statistics.mean(int(m.sum()) for m in masks),
                 "bytes_per_call": statistics.mean(c.bytes for c in costs), "checks": {},
                 "times": {}, "kernels_ms_per_call": {}}
        result["buckets"][str(rows)] = entry

        def op(tiles, module=experts):
            def run():
                for s, y in zip(sets, ys):
                    module.run_experts(sh, tiles, x=s["x"], ids=s["ids"], w1=s["w1"], s1=s["s1"],
                                       w2=s["w2"], s2=s["s2"], y=y)
            return run

        def first_y(run) -> torch.Tensor:
            for y in ys:
                poison(y)
            run()
            side.sync()
            return ys[0].clone()

        variants = {"baseline": op(base_tiles, base_mod), "default": op(default)}
        for o in sweep:
            variants[config_name(o)] = op(dataclasses.replace(default, **o))
        # checks (first set)
        y_base = first_y(variants["baseline"])
        y_new = first_y(variants["default"])
        m0 = masks[0]
        c = entry["checks"]
        c["default_unwritten"] = unwritten(y_new[m0])
        c["default_vs_baseline"] = compare(y_base, y_new, m0).as_dict()
        if rows in (min(rows_list), max(rows_list)):
            s0 = sets[0]
            y_ref = ref.moe_experts(sh, **{k: s0[k] for k in ("x", "ids", "w1", "s1", "w2", "s2")})["y"]
            c["default_vs_reference"] = compare(y_ref, y_new, m0).as_dict()
            c["baseline_vs_reference"] = compare(y_ref, y_base, m0).as_dict()
        bad = c["default_unwritten"] > 0 or c["default_vs_baseline"]["rel_rms"] > REL_RMS_LIMIT or (
            "default_vs_reference" in c and c["default_vs_reference"]["rel_rms"] > REL_RMS_LIMIT)
        if bad:
            failed.append(f"rows {rows}: default")
        log(f"rows {rows}: default vs baseline rel_rms {c['default_vs_baseline']['rel_rms']:.2e} "
            f"max_ulp {c['default_vs_baseline']['max_ulp']} unwritten {c['default_unwritten']}")
        # graphs (the sweep within the budget)
        graphs = {}
        for name, run in variants.items():
            if name not in ("baseline", "default") and time.monotonic() - T0 > args.budget_s:
                result["skipped"].append(f"rows {rows}: {name} (budget)")
                continue
            try:
                if name not in ("baseline", "default"):
                    y_cfg = first_y(run)
                    d = compare(y_new, y_cfg, m0).as_dict()
                    c[f"{name}_vs_default"] = {"differing": d["differing"], "rel_rms": d["rel_rms"],
                                               "max_ulp": d["max_ulp"]}
                    if d["rel_rms"] > REL_RMS_LIMIT or unwritten(y_cfg[m0]):
                        failed.append(f"rows {rows}: {name}")
                graphs[name] = graph_of(run, dev)
            except Exception as e:  # a configuration that does not compile or run is a row
                result["skipped"].append(f"rows {rows}: {name} ({type(e).__name__}: {str(e)[:300]})")
                log(f"rows {rows}: {name} failed: {type(e).__name__}: {str(e)[:300]}")
        samples = time_graphs(graphs, args.rounds, args.replays)
        for name, ms in samples.items():
            per_call = median_per_call(ms, len(sets))
            entry["times"][name] = {**bandwidth_row(entry["bytes_per_call"], per_call, bw),
                                    "spread_pct": 100.0 * (max(ms) - min(ms)) / statistics.median(ms)}
        for name in (list(graphs) if rows == args.breakdown_rows else ("baseline", "default")):
            if name in graphs and cuda:
                entry["kernels_ms_per_call"][name] = kernel_breakdown(graphs[name], 3, len(sets))
        log(f"rows {rows}: " + ", ".join(f"{k} {v['ms']:.3f} ms ({v['pct_of_read_bw'] or 0:.1f} %)"
                                          for k, v in entry["times"].items()))
        del graphs
        if cuda:
            torch.cuda.empty_cache()
        save()
    end = read_ceiling(dev)
    result["read_bandwidth_end_Bps"] = end["ceiling_Bps"] if end else None
    result["failed"] = failed
    result["wall_s"] = time.monotonic() - T0
    save()
    print(table(result))
    for name in failed:
        print(f"CHECK FAILED: {name}")
    print(f"skipped: {result['skipped']}" if result["skipped"] else "skipped: none")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
