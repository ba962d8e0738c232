"""Vocab-parallel reverse KL on several GPUs (issue 8): the split form's tensor-parallel path.

Run with one process per GPU, NVLink multicast off:

    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node=2 \\
        benchmarks/tp_reverse_kl.py --out DIR

Every rank draws the same full (M, V) logits and target from one seed, keeps its contiguous vocab
slice (uneven when V does not divide), and runs ``normlab.reverse_kl(..., form="split",
group=WORLD)``: per-row max and sum-exp are all-reduced through NCCL. Checked against the
unsharded loss and gradient computed on the same GPU (fp32 math, bf16 inputs). Times are device
time per call (torch.profiler kernel sums, cold L2, the NCCL kernels included) on each rank, and
GB/s on the 3·M·V_local·2 B model (read logits and target once, write the gradient once).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off on shared hosts

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import normlab
from normlab.bench import traffic
from normlab.bench.device import card_name, git_commit
from normlab.bench.timing import time_call

TOKENS = 4096
VOCABS = (131072, 262144)


def shard(n_cols: int, rank: int, world: int) -> slice:
    base, extra = divmod(n_cols, world)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (1 if rank < extra else 0))


def _gbps(n_cols: int, device_us: float) -> float:
    """GB/s of reverse KL fwd+bwd over TOKENS x n_cols bf16 (traffic's minimal model, 3 passes)."""
    return traffic.gbps(traffic.bytes_moved("reverse_kl", "fwd+bwd", TOKENS, n_cols), device_us)


def _sync() -> None:
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()


def case(n_cols: int, rank: int, world: int, reps: int) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(1234 + n_cols)
    logits = torch.randn(TOKENS, n_cols, device="cuda", generator=gen).mul_(3).bfloat16()
    target = torch.randn(TOKENS, n_cols, device="cuda", generator=gen).mul_(3).bfloat16()
    cols = shard(n_cols, rank, world)

    full = logits.clone().requires_grad_(True)
    loss_full = normlab.reverse_kl(full, target, form="split")
    (grad_full,) = torch.autograd.grad(loss_full, full)

    local = logits[:, cols].contiguous().requires_grad_(True)
    local_target = target[:, cols].contiguous()
    loss_tp = normlab.reverse_kl(local, local_target, form="split", group=dist.group.WORLD)
    (grad_tp,) = torch.autograd.grad(loss_tp, local)

    loss_err = abs(loss_tp.item() - loss_full.item()) / max(abs(loss_full.item()), 1e-30)
    g_ref = grad_full[:, cols].float()
    grad_err = ((grad_tp.float() - g_ref).norm() / g_ref.norm()).item()

    def sharded():
        x = local.detach().requires_grad_(True)
        loss = normlab.reverse_kl(x, local_target, form="split", group=dist.group.WORLD)
        return torch.autograd.grad(loss, x)

    def unsharded():
        x = logits.detach().requires_grad_(True)
        loss = normlab.reverse_kl(x, target, form="split")
        return torch.autograd.grad(loss, x)

    # The ranks enter each timing together (host barrier, then idle GPUs): the NCCL kernels'
    # device time would otherwise include the wait for a rank still busy elsewhere.
    # One untimed profiled round first: a rank's first profiled NCCL call stalled for ~27 ms on
    # the H200 pair (the other rank's collective waited inside its kernel).
    time_call(sharded, reps=2, warmup=1)
    _sync()
    t_tp = time_call(sharded, reps=reps, warmup=3)
    _sync()
    t_full = time_call(unsharded, reps=reps, warmup=3) if rank == 0 else None
    _sync()
    local_cols = cols.stop - cols.start
    nccl_us = sum(us for name, us in t_tp.kernels.items() if name.startswith("nccl"))
    out = {
        "M": TOKENS, "V": n_cols, "rank": rank, "world": world, "V_local": local_cols,
        "loss_rel_err": loss_err, "grad_rel_err": grad_err,
        "sharded_device_us": t_tp.device_us, "sharded_wall_us": t_tp.wall_us,
        "sharded_nccl_us": nccl_us, "sharded_compute_us": t_tp.device_us - nccl_us,
        "sharded_gbps": _gbps(local_cols, t_tp.device_us),
        "sharded_compute_gbps": _gbps(local_cols, t_tp.device_us - nccl_us),
        "sharded_kernels": t_tp.kernels,
    }
    if t_full is not None:
        out.update({
            "unsharded_device_us": t_full.device_us, "unsharded_wall_us": t_full.wall_us,
            "unsharded_gbps": _gbps(n_cols, t_full.device_us),
            "unsharded_kernels": t_full.kernels,
        })
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    results = [case(v, rank, world, args.reps) for v in VOCABS]
    gathered = [None] * world
    dist.all_gather_object(gathered, results)
    ok = True
    if rank == 0:
        rows = [r for per_rank in gathered for r in per_rank]
        meta = {"card": card_name(), "torch": torch.__version__, "world": world,
                "commit": git_commit(), "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE")}
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "tp_reverse_kl.json").write_text(
            json.dumps({"meta": meta, "rows": rows}, indent=1))
        print(f"{meta}")
        print(f"{'V':>7} {'rank':>4} {'V_local':>7} {'loss err':>9} {'grad err':>9} "
              f"{'TP µs':>8} {'of it NCCL':>10} {'TP GB/s':>8} {'w/o NCCL':>8} {'1-GPU µs':>9} "
              f"{'1-GPU GB/s':>10}")
        for r in rows:
            ok &= r["loss_rel_err"] < 1e-4 and r["grad_rel_err"] < 1e-2
            print(f"{r['V']:>7} {r['rank']:>4} {r['V_local']:>7} {r['loss_rel_err']:>9.2e} "
                  f"{r['grad_rel_err']:>9.2e} {r['sharded_device_us']:>8.1f} "
                  f"{r['sharded_nccl_us']:>10.1f} "
                  f"{r['sharded_gbps']:>8.0f} {r['sharded_compute_gbps']:>8.0f} "
                  f"{r.get('unsharded_device_us', float('nan')):>9.1f} "
                  f"{r.get('unsharded_gbps', float('nan')):>10.0f}")
        print("TP check:", "PASS" if ok else "FAIL")
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
