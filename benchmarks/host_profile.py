"""Where the host time of one normlab call goes: cProfile over a launch-bound loop (GPU).

    python3 benchmarks/host_profile.py --op rms_norm --direction fwd+bwd --calls 2000
    python3 benchmarks/host_profile.py --emulate [--no-replay] [--torch-reduce] [--native]  # CPU

``--emulate`` runs the GPU host path on a CPU with Triton's launchers replaced by stand-ins
(``emulated_gpu.py``): µs per call of everything up to ``cuLaunchKernel``, torch's CPU op beside
it for scale (its time includes its CPU arithmetic). The losses sum in the kernel, as on a GPU
by default; ``--torch-reduce`` sums in torch (``NORMLAB_LOSS_REDUCE=0``). ``--native``: the
norms' replays through the C++ node and programs (``normlab/_native.cpp``), launching nothing.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats

import torch

from normlab.bench import overhead


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", choices=overhead.OPS, default="rms_norm")
    parser.add_argument("--direction", choices=overhead.DIRECTIONS, default="fwd+bwd")
    parser.add_argument("--impl", choices=overhead.IMPLS, default="normlab")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--emulate", action="store_true", help="CPU: launchers stubbed")
    parser.add_argument("--no-replay", action="store_true", help="with --emulate: replay off")
    parser.add_argument("--native", action="store_true",
                        help="with --emulate: the norms' C++ node and replay, launching nothing")
    parser.add_argument("--torch-reduce", action="store_true",
                        help="with --emulate: the losses sum in torch (NORMLAB_LOSS_REDUCE=0)")
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error("--calls must be >= 1")
    if args.emulate:
        return _emulated(args)
    _, _, run = overhead.host_case(args.op, args.impl, args.direction, torch.bfloat16,
                               overhead._runtime.DEVICE)  # fmt: skip
    for _ in range(50):
        run()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.calls):
        run()
    torch.cuda.synchronize()
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out).sort_stats("tottime")
    stats.print_stats(args.top)
    print(f"{args.op} {args.direction} {args.impl}: {args.calls} calls")
    print(out.getvalue())
    return 0


def _emulated(args) -> int:
    import time

    from emulated_gpu import emulate

    from normlab.losses import config as loss_config
    from normlab.norms import config

    config.memoize()  # as on a GPU
    loss_config.REDUCE_IN_KERNEL = not args.torch_reduce
    import functools

    import normlab

    cross_entropy = normlab.cross_entropy  # a GPU call's default: no host-side label check
    normlab.cross_entropy = functools.partial(cross_entropy, check_labels=False)
    if args.native:
        from normlab import _native

        if _native.null_launches() is None:
            raise SystemExit("--native: the C++ replay did not build")
        _native.ENABLED = True
    with emulate(replay=not args.no_replay, keep_runs=False):
        _, _, run = overhead.host_case(args.op, "normlab", args.direction, torch.bfloat16, "cpu")
        normlab.cross_entropy = cross_entropy
        _, _, torch_run = overhead.host_case(args.op, "torch", args.direction, torch.bfloat16,
                                             "cpu")  # fmt: skip
        for label, call in (("normlab", run), ("torch (CPU op)", torch_run)):
            for _ in range(50):
                call()
            best = float("inf")
            for _ in range(5):  # the least disturbed of five loops
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    call()
                best = min(best, (time.perf_counter() - t0) * 1e6 / args.calls)
            what = (f"loss sum in {'kernel' if not args.torch_reduce else 'torch'}"
                    if args.op in overhead.LOSS_OPS
                    else f"replay {'off' if args.no_replay else 'on'}"
                    f"{', C++ node' if args.native else ''}")  # fmt: skip
            print(f"{args.op} {args.direction} {label}: {best:.1f} µs per call "
                  f"(emulated GPU host path, {what})")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.calls):
            run()
        prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.top)
    print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
