"""Device tool: one op's kernel from several kernel trees (main's and candidates') on the full
model's own inputs, checked against main's outputs and timed interleaved, in one process.

    python3 bench/tools/op_bench.py --op mla.topk --op dense --variant main=DIR0 \\
        --variant topk=DIR1 --variant dense=DIR2 --out $OUT/ops.json [--rows 16,32,64,128,256]
        [--calls 24] [--rounds 4] [--replays 5]

Each ``DIR`` is a copy of a revision's ``kernels/k31`` (``git archive REV kernels/k31``); the
variant named ``main`` is the baseline. ``--op`` is an op name or ``dense`` (every dense
projection). This is the orchestrator's micro-benchmark before judgments: it says which
candidates are worth the minutes a judgment costs; it decides nothing (the gates do).

1. Builds the side the scorer builds (kern.yaml's gpu profile) from the repository's tree and
   runs one eager step per row count with a dispatcher hook that records every call of the
   ops asked for: its inputs and state before the call (copied; tensors over 256 MB, the
   caches and weights, by reference: nothing later in the step changes them), and main's
   outputs after it.
2. Per op and row count, up to ``--calls`` of its calls spread over the layers. Every variant
   whose sources of that op differ from main's (others are main) runs them once with its
   outputs poisoned first: unwritten elements and the difference from main's outputs (rel RMS,
   max ulp, differing elements, exact) are the checks.
3. Times one CUDA graph per variant that runs all those calls back to back (consecutive calls
   touch other layers' weights and caches: little stays in L2), replayed ``--replays`` times per
   visit in alternating orders over ``--rounds`` rounds. The median replay over the calls is
   the time per call; bytes per call from the op's roofline give its share of the card's read
   ceiling, measured in this run (gates/side/ceiling.py).

Writes one JSON document to ``--out`` (rewritten after each op, so a run cut short keeps what
it measured) and prints a table last.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench.tools.experts_bench import T0, graph_of, log, time_graphs  # noqa: E402

COPY_LIMIT = 256 * 2**20  # bytes: larger arguments (caches, weights) are referenced, not copied


# ------------------------------------------------------------------ pure
def spread(n: int, k: int) -> list[int]:
    """Up to ``k`` indices of ``range(n)`` spread evenly, first and last included."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)}) if k > 1 else [0]


def parse_variants(items: list[str]) -> dict[str, Path]:
    out = {}
    for item in items:
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder:
            raise SystemExit(f"op_bench: --variant expects NAME=DIR, found {item!r}")
        out[name] = Path(folder)
    if "main" not in out:
        raise SystemExit("op_bench: expected a --variant main=DIR (the baseline)")
    return out


def verdict(diffs: list[dict], unwritten: int) -> str:
    if unwritten:
        return f"UNWRITTEN {unwritten}"
    if all(d["differing"] == 0 for d in diffs):
        return "bit-identical"
    return f"differs: rel_rms {max(d['rel_rms'] for d in diffs):.2e}, max ulp {max(d['max_ulp'] for d in diffs):.0f}"


# ------------------------------------------------------------------ trees
def load_tree(name: str, folder: Path) -> str:
    """Import the tree in ``folder`` as package ``_opbench_<name>`` (its imports are relative)
    with its own tunables table; returns the package name."""
    pkg = f"_opbench_{name}"
    spec = importlib.util.spec_from_file_location(pkg, folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[pkg] = mod
    spec.loader.exec_module(mod)
    tun = importlib.import_module(f"{pkg}.tunables")
    merged = {}
    for fam in tun.FAMILIES:  # tunables.table() imports kernels.k31.*: this tree's own instead
        try:
            fmod = importlib.import_module(f"{pkg}.{fam}.tunables")
        except ModuleNotFoundError:
            continue
        merged.update({k: (v, tuple(c)) for k, (v, c) in fmod.TUNABLES.items()})
    tun._TABLE = merged
    return pkg


def kernel_of(pkg: str, path: str):
    module, fn = path.split(":")
    return getattr(importlib.import_module(f"{pkg}.{module.removeprefix('kernels.k31.')}"), fn)


def op_files(spec) -> list[str]:
    """The files an op's result depends on in a tree: its sources and the tunables beside each
    (a tunables-only candidate changes the op too), as paths under kernels/k31/."""
    rels = [src.removeprefix("kernels/k31/") for src in spec.sources]
    tunables = {str(Path(r).parent / "tunables.py") for r in rels}
    return rels + sorted(tunables - set(rels))


def sources_differ(spec, folder: Path) -> bool:
    for rel in op_files(spec):
        a, b = ROOT / "kernels" / "k31" / rel, folder / rel
        if a.exists() != b.exists() or (a.exists() and a.read_bytes() != b.read_bytes()):
            return True
    return False


# ------------------------------------------------------------------ recording
def _copy(v):
    if isinstance(v, torch.Tensor) and v.numel() * v.element_size() <= COPY_LIMIT:
        return v.clone()
    return v


class Recorder:
    """Dispatcher hook: the calls of each group (a set of op names) in step order; those whose
    index in their group is in ``keep[group]`` (all, when ``keep`` is None) are recorded:
    inputs and state copied before the call, outputs after it."""

    def __init__(self, groups: dict[str, set[str]], keep: dict[str, set[int]] | None = None):
        self.group_of = {n: g for g, names in groups.items() for n in names}
        self.keep = keep
        self.seen = {g: 0 for g in groups}
        self.calls: dict[str, list[dict]] = {g: [] for g in groups}

    def __call__(self, spec, site, args, run):
        g = self.group_of.get(spec.name)
        if g is None:
            run()
            return
        i, self.seen[g] = self.seen[g], self.seen[g] + 1
        if self.keep is None or i not in self.keep[g]:
            run()
            return
        before = {k: _copy(v) for k, v in args.items() if k not in spec.outputs}
        run()
        self.calls[g].append({"spec": spec, "site": site, "args": before,
                              "outputs": {k: args[k].clone() for k in spec.outputs}})


def call_args(call: dict) -> dict:
    """A call's arguments for one variant: its own state copy and fresh (poisoned) outputs."""
    from gates.side.numerics import poison

    spec = call["spec"]
    args = {k: (v.clone() if k in spec.state and isinstance(v, torch.Tensor) else v)
            for k, v in call["args"].items()}
    for k, ref in call["outputs"].items():
        args[k] = poison(torch.empty_strided(ref.size(), ref.stride(), dtype=ref.dtype, device=ref.device))
    return args


# ------------------------------------------------------------------ the shell
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="op_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--op", action="append", required=True, help="op name, or 'dense'")
    ap.add_argument("--variant", action="append", required=True, help="NAME=DIR (a kernels/k31 copy)")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--rows", default="16,32,64,128,256")
    ap.add_argument("--calls", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--replays", type=int, default=5)
    ap.add_argument("--commit", default="unknown")
    args = ap.parse_args(argv)
    variants = parse_variants(args.variant)

    from gates.side.ceiling import read_ceiling
    from gates.side.numerics import compare, unwritten
    from gates.side.session import Side, Spec, environment
    from gates.spec import side_spec
    from harness import settings as hsettings
    from kernels.k31 import contracts

    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    rows_list = [int(r) for r in args.rows.split(",")]
    groups = {op: ({s.name for s in contracts.OPS.values() if s.family == "dense"} if op == "dense" else {op})
              for op in args.op}
    unknown = set().union(*groups.values()) - set(contracts.OPS)
    if unknown:
        raise SystemExit(f"op_bench: no op {sorted(unknown)}; ops: {', '.join(sorted(contracts.OPS))}")
    cfg = hsettings.load(ROOT / "kern.yaml").resolve(cuda)
    spec = Spec.from_dict(side_spec(cfg.target, cfg.machine, rows=rows_list, steps=1))
    pkgs = {v: load_tree(v, folder) for v, folder in variants.items()}
    result = {"meta": {"date": time.strftime("%Y-%m-%d"), "commit": args.commit, "tool": "bench/tools/op_bench.py",
                       "argv": sys.argv[1:], "variants": {k: str(v) for k, v in variants.items()}},
              "environment": environment(dev), "read_ceiling": read_ceiling(dev), "ops": {}}
    bw = (result["read_ceiling"] or {}).get("ceiling_Bps")
    log(f"read ceiling {bw / 1e12:.2f} TB/s" if bw else "no read ceiling (CPU: mechanics only)")

    def save():
        args.out.write_text(json.dumps(result, indent=1, default=str))

    side = Side(spec, str(dev))
    sh = side.shapes
    log(f"model built in {side.build_s:.0f}s")
    for rows in rows_list:
        # one eager step counts each group's calls, a second records the spread-out ones
        recs = [Recorder(groups)]
        recs[0].keep = {g: set() for g in groups}
        for i in range(2):
            step = side.step(rows, hook=recs[-1])
            side.set_inputs(step, 0)
            step.run()
            side.sync()
            del step
            if i == 0:
                recs.append(Recorder(groups, {g: set(spread(n, args.calls)) for g, n in recs[0].seen.items()}))
        rec = recs[-1]
        for op in groups:
            calls = rec.calls[op]
            specs = {c["spec"].name: c["spec"] for c in calls}
            entry = result["ops"].setdefault(op, {}).setdefault(
                str(rows), {"calls": len(calls), "calls_in_step": recs[0].seen[op], "variants": {}})
            if not calls:
                entry["error"] = "no calls recorded"
                continue
            cost = [c["spec"].load_roofline()(sh, {**c["args"], **c["outputs"]}) for c in calls]
            entry["bytes_per_call"] = statistics.mean(x.bytes for x in cost)
            entry["flops_per_call"] = statistics.mean(x.flops for x in cost)
            runs = {}
            for v, pkg in pkgs.items():
                if v != "main" and not any(sources_differ(s, variants[v]) for s in specs.values()):
                    continue  # this variant's op is main's
                fns = {n: kernel_of(pkg, s.kernel) for n, s in specs.items()}
                arg_sets = [call_args(c) for c in calls]
                check = {"diffs": [], "unwritten": 0}
                try:
                    for c, a in zip(calls, arg_sets):
                        fns[c["spec"].name](sh, **a)
                    side.sync()
                    for c, a in zip(calls, arg_sets):
                        # rows an op does not define (pairs of another rank's experts) are left
                        # unwritten by contract: judged like the gates judge them, masked out
                        masks = c["spec"].defined(sh, {**c["args"], **c["outputs"]}) if c["spec"].defined else {}
                        for k, ref in c["outputs"].items():
                            m = masks.get(k)
                            check["unwritten"] += unwritten(a[k] if m is None else a[k][m])
                            check["diffs"].append(compare(ref, a[k], m).__dict__)
                except Exception as e:  # noqa: BLE001 - a candidate that fails is a result
                    entry["variants"][v] = {"error": f"{type(e).__name__}: {e}"[:500]}
                    log(f"{op} rows {rows} {v}: {entry['variants'][v]['error']}")
                    continue
                entry["variants"][v] = {"check": verdict(check["diffs"], check["unwritten"]),
                                        "rel_rms_max": max(d["rel_rms"] for d in check["diffs"]),
                                        "differing": sum(d["differing"] for d in check["diffs"])}

                def run_all(arg_sets=arg_sets, fns=fns):
                    for c, a in zip(calls, arg_sets):
                        fns[c["spec"].name](sh, **a)

                try:
                    runs[v] = graph_of(run_all, dev)
                except Exception as e:  # noqa: BLE001
                    entry["variants"][v]["error"] = f"capture: {type(e).__name__}: {e}"[:500]
            samples = time_graphs(runs, args.rounds if cuda else 1, args.replays if cuda else 1)
            for v, sm in samples.items():
                ms = statistics.median(sm) / len(calls)
                gbps = entry["bytes_per_call"] / (ms * 1e-3)
                entry["variants"][v].update(ms_per_call=ms, ms_per_step=ms * entry["calls_in_step"], spread_pct=100 * (max(sm) - min(sm)) / statistics.median(sm),
                                            pct_of_ceiling=100 * gbps / bw if bw else None)
            base = entry["variants"].get("main", {}).get("ms_per_call")
            log(f"{op} rows {rows}: " + ", ".join(
                f"{v} {e['ms_per_call'] * 1e3:.1f} us" + (f" ({base / e['ms_per_call']:.2f}x)" if base else "")
                + f" [{e['check']}]" for v, e in entry["variants"].items() if "ms_per_call" in e))
            del runs
            save()
        del rec, recs
        if cuda:
            torch.cuda.empty_cache()
    result["wall_s"] = time.monotonic() - T0
    save()
    print(table(result))
    return 0


def table(result: dict) -> str:
    lines = [f"{'op':28s} {'rows':>5s} {'variant':10s} {'us/call':>9s} {'ms/step':>8s} {'x main':>7s} {'% ceil':>7s}  check"]
    for op, per in result["ops"].items():
        for rows, e in per.items():
            base = e["variants"].get("main", {}).get("ms_per_call")
            for v, r in e["variants"].items():
                if "ms_per_call" not in r:
                    lines.append(f"{op:28s} {rows:>5s} {v:10s} {'-':>9s} {'-':>8s} {'-':>7s} {'-':>7s}  "
                                 f"{r.get('error', r.get('check'))}")
                    continue
                speed = f"{base / r['ms_per_call']:.2f}" if base else "-"
                pct = f"{r['pct_of_ceiling']:.0f}" if r.get("pct_of_ceiling") else "-"
                lines.append(f"{op:28s} {rows:>5s} {v:10s} {r['ms_per_call'] * 1e3:9.1f} {r['ms_per_step']:8.3f} "
                             f"{speed:>7s} {pct:>7s}  {r['check']}" + (f"  ERROR {r['error']}" if "error" in r else ""))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
