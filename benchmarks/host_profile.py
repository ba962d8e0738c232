"""Where the host time of one normlab call goes: cProfile over a launch-bound loop (GPU).

    python3 benchmarks/host_profile.py --op rms_norm --direction fwd+bwd --calls 2000
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
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error("--calls must be >= 1")
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


if __name__ == "__main__":
    raise SystemExit(main())
