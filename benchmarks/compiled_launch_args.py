"""What a user-defined Triton kernel's arguments cost a compiled call's host (GPU).

    python3 benchmarks/compiled_launch_args.py --out FILE.json [--calls 2000] [--rounds 5]

One copy kernel with two live pointers, eight placeholder pointers and four integer strides,
compiled with ``fullgraph=True`` as a Triton op (``torch.library.triton_op`` + ``wrap_triton``,
as normlab's ops are traced) in four ways, beside Inductor's own kernel for the same copy:

- ``aliased``: the placeholders are the input again (as the norm forward passed them before
  2026-12-07, and the other kernels still do);
- ``none``: the placeholders are None (constexpr: Triton's launcher leaves them out);
- ``aliased_static``, ``none_static``: as those, with Inductor's opt-in static launch of user
  kernels (``static_launch_user_defined_triton_kernels``);
- ``inductor``: ``x * 1`` compiled, Inductor's own kernel through its static launcher.

A 4 x 1024 bf16 input, no gradient. Prints and writes the host µs per call (a launch-bound loop;
the median over ``--rounds`` rounds that take the cases in turn) and, from cProfile over 200
calls of each case, which launcher ran. Inductor's caches are off, so each case compiles anew.
"""

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")

CASES = ("aliased", "none", "aliased_static", "none_static", "inductor")


def _cases():
    """{case: compiled fn of x} (see the module docstring)."""
    import torch
    import triton
    import triton.language as tl
    from torch._inductor import config as inductor_config

    @triton.jit
    def _copy_kernel(x_ptr, y_ptr, p0, p1, p2, p3, p4, p5, p6, p7, s0, s1, s2, s3, n,
                     BLOCK: tl.constexpr):  # fmt: skip
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)

    def op(name, placeholders):
        @torch.library.triton_op(f"launch_args::copy_{name}", mutates_args=())
        def copy(x: torch.Tensor) -> torch.Tensor:
            y = torch.empty_like(x)
            ps = [x if placeholders else None] * 8
            n = x.numel()
            torch.library.wrap_triton(_copy_kernel)[(triton.cdiv(n, 1024),)](
                x, y, *ps, x.stride(0), y.stride(0), x.stride(0), y.stride(0), n, BLOCK=1024)
            return y

        return copy

    aliased, none = op("aliased", True), op("none", False)
    x = torch.randn(4, 1024, dtype=torch.bfloat16, device="cuda")
    fns, errors = {}, {}

    def compiled(case, fn):
        try:
            fns[case] = torch.compile(fn, fullgraph=True)
            torch.testing.assert_close(fns[case](x), x, atol=0, rtol=0)
        except Exception as e:  # a case that does not compile is a result too
            fns.pop(case, None)
            errors[case] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"

    compiled("aliased", lambda x: aliased(x))
    compiled("none", lambda x: none(x))
    compiled("inductor", lambda x: x * 1)
    with inductor_config.patch(static_launch_user_defined_triton_kernels=True):  # read at compile
        aliased_static, none_static = op("aliased_static", True), op("none_static", False)
        compiled("aliased_static", lambda x: aliased_static(x))
        compiled("none_static", lambda x: none_static(x))
    return fns, errors, x


def _host_us(fn, x, calls: int) -> float:
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(x)
    elapsed = time.perf_counter() - t0
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def _launchers(fn, x) -> dict[str, int]:
    """Calls of each launcher over 200 calls of ``fn`` (cProfile)."""
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(200):
        fn(x)
    profile.disable()
    counts = {"static": 0, "triton": 0}
    for (path, _line, name), row in pstats.Stats(profile).stats.items():
        if "static_triton_launcher" in path and name == "run":
            counts["static"] += row[0]
        elif path.endswith("driver.py") and name == "__call__":  # Triton's CudaLauncher
            counts["triton"] += row[0]
    return counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="FILE.json")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if not args.out.endswith(".json"):
        parser.error("--out takes FILE.json")
    if args.calls < 100:
        parser.error("--calls must be >= 100")
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    import torch

    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (Inductor's GPU wrapper and launchers are what this times)")
    fns, errors, x = _cases()
    cases = [case for case in CASES if case in fns]
    for fn in fns.values():  # warm
        _host_us(fn, x, 100)
    hosts = {case: [] for case in cases}
    for r in range(args.rounds):
        for case in cases[r % len(cases):] + cases[:r % len(cases)]:
            hosts[case].append(_host_us(fns[case], x, args.calls))
    records = [{"case": case, "error": error} for case, error in errors.items()]
    for case, error in errors.items():
        print(f"{case:12s} {error}", flush=True)
    for case in cases:
        rec = {"case": case, "host_us": round(statistics.median(hosts[case]), 2),
               "host_us_rounds": [round(h, 2) for h in hosts[case]],
               "launcher_calls_per_200": _launchers(fns[case], x)}  # fmt: skip
        records.append(rec)
        print(f"{case:12s} host µs {rec['host_us']:7.2f}  rounds {rec['host_us_rounds']}  "
              f"launchers {rec['launcher_calls_per_200']}", flush=True)
    meta = {"torch": torch.__version__, "triton": __import__("triton").__version__,
            "device": torch.cuda.get_device_name(), "python": sys.version.split()[0],
            "commit": os.environ.get("NORMLAB_COMMIT", "unknown"), "calls": args.calls,
            "rounds": args.rounds, "shape": [4, 1024], "dtype": "bfloat16"}  # fmt: skip
    Path(args.out).write_text(json.dumps({"meta": meta, "records": records}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
