"""Dynamo's own cost per compiled call: the frame and the guards its trace installed.

    python3 benchmarks/compiled_guards.py --out FILE.json [--calls 2000] [--rounds 5]
        [--op rms_norm,layer_norm,cross_entropy,reverse_kl]

Each op, normlab's and torch's own, is compiled with ``fullgraph=True`` and a backend that runs
the traced graph once and hands back those outputs on every later call: a call then times
Dynamo alone (the cached frame's guard tree, checked on every call, and the call into the
graph), no kernel and no launcher. Runs on a GPU and under the interpreter alike; the numbers are
the host CPU's. Prints and writes, per op and implementation, the guard tree's lines and the µs
per call: the median over ``--rounds`` rounds of ``--calls`` calls that take the implementations
in turn. Tiny inputs (norms 4 x 1024, losses 4 x 4096, fp32), no gradient.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

OPS = ("rms_norm", "layer_norm", "cross_entropy", "reverse_kl")


def _cases(op, device):
    """{impl: (fn, inputs)} for ``op``."""
    import torch
    import torch.nn.functional as F

    import normlab

    gen = torch.Generator().manual_seed(0)
    if op in ("rms_norm", "layer_norm"):
        x, w, b = (torch.randn(s, generator=gen).to(device) for s in ((4, 1024), 1024, 1024))
        if op == "rms_norm":
            return {"normlab": (lambda x, w: normlab.rms_norm(x, w), (x, w)),
                    "torch": (lambda x, w: F.rms_norm(x, (1024,), w, 1e-6), (x, w))}  # fmt: skip
        return {"normlab": (lambda x, w, b: normlab.layer_norm(x, w, b), (x, w, b)),
                "torch": (lambda x, w, b: F.layer_norm(x, (1024,), w, b), (x, w, b))}  # fmt: skip
    x = torch.randn(4, 4096, generator=gen).to(device)
    if op == "cross_entropy":
        labels = torch.randint(0, 4096, (4,), generator=gen).to(device)
        return {"normlab": (lambda x, y: normlab.cross_entropy(x, y), (x, labels)),
                "torch": (lambda x, y: F.cross_entropy(x, y), (x, labels))}  # fmt: skip
    t = torch.randn(4, 4096, generator=gen).to(device)

    def torch_rkl(x, t):
        return F.kl_div(F.log_softmax(t, -1), F.log_softmax(x, -1), reduction="batchmean",
                        log_target=True)  # fmt: skip

    return {"normlab": (lambda x, t: normlab.reverse_kl(x, t), (x, t)),
            "torch": (torch_rkl, (x, t))}  # fmt: skip


def _replaying_backend(gm, example_inputs):
    """Run the graph once; every call returns those outputs."""
    outputs = gm(*example_inputs)
    return lambda *_args: outputs


def _guard_lines(fn) -> int:
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    (entry,) = _debug_get_cache_entry_list(fn.__code__)
    return len(str(entry.guard_manager).splitlines())


def measure(ops, calls: int, rounds: int) -> list[dict]:
    import torch

    from normlab import _runtime

    rows = []
    for op in ops:
        cases = _cases(op, _runtime.DEVICE)
        compiled, times = {}, {impl: [] for impl in cases}
        torch._dynamo.reset()
        for impl, (fn, inputs) in cases.items():  # each function one cache entry: one tree
            compiled[impl] = torch.compile(fn, backend=_replaying_backend, fullgraph=True)
            with torch.no_grad():
                compiled[impl](*inputs)
        lines = {impl: _guard_lines(fn) for impl, (fn, _) in cases.items()}
        names = list(cases)
        with torch.no_grad():
            for r in range(rounds):
                for impl in names[r % len(names):] + names[:r % len(names)]:
                    call, inputs = compiled[impl], cases[impl][1]
                    for _ in range(calls // 10):  # warm
                        call(*inputs)
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        call(*inputs)
                    times[impl].append((time.perf_counter() - t0) * 1e6 / calls)
        for impl in names:
            rows.append({"op": op, "impl": impl, "guard_lines": lines[impl],
                         "us_per_call": statistics.median(times[impl]),
                         "rounds_us": [round(t, 3) for t in times[impl]]})  # fmt: skip
    return rows


def _host_cpu() -> str:
    """The host CPU's model name (Linux), else what platform knows."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="FILE.json")
    parser.add_argument("--calls", type=int, default=2000, help="calls per round (default 2000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--op", default=",".join(OPS), help=f"comma list of {', '.join(OPS)}")
    args = parser.parse_args(argv)
    ops = [o for o in args.op.split(",") if o]
    bad = [o for o in ops if o not in OPS]
    if bad or not ops:
        parser.error(f"--op: a comma list of {', '.join(OPS)}; got {args.op!r}")
    if args.calls < 10:
        parser.error("--calls must be >= 10")
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if args.out.suffix != ".json":
        parser.error("--out takes FILE.json")

    import platform

    import torch
    import triton

    from normlab import _runtime
    from normlab.bench.device import git_commit

    rows = measure(ops, args.calls, args.rounds)
    host = _host_cpu()
    print(f"| op | impl | guard lines | µs per call ({_runtime.DEVICE}, host {host}) |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['op']} | {row['impl']} | {row['guard_lines']} | {row['us_per_call']:.2f} |")
    meta = {"device": _runtime.DEVICE, "card": torch.cuda.get_device_name()
            if _runtime.DEVICE == "cuda" else "cpu (interpreter)", "host": host,
            "torch": torch.__version__, "triton": triton.__version__,
            "python": platform.python_version(), "commit": git_commit(),
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "command": "python3 benchmarks/compiled_guards.py " + " ".join(
                [*sys.argv[1:sys.argv.index("--out") + 1], args.out.name,
                 *sys.argv[sys.argv.index("--out") + 2:]] if "--out" in sys.argv else sys.argv[1:]),
            "note": "µs per call: Dynamo's frame and guards, the graph replaced by its outputs; "
                    f"median of {args.rounds} rounds of {args.calls} calls"}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n",
                        encoding="utf-8")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
