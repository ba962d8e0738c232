"""A real model's training step with normlab swapped in: Hugging Face's LlamaForCausalLM (GPU).

    python3 benchmarks/llama_step.py --out out/llama_step.json [--layers 16] [--steps 20]

Builds a Llama from a config near 1B parameters (hidden 2048, 16 layers, 32 heads, 8 KV heads,
MLP 8192, vocabulary 128256, sequence 2048; random weights, nothing downloaded) and trains it
for ``--steps`` steps of AdamW (lr 3e-4) on one fixed batch of random tokens, in bf16: the
model memorizes it, so the loss falls step by step and the curves have something to agree on.
Variants, each in its own process (Liger patches transformers' classes globally):

* ``hf``: the model as Hugging Face builds it;
* ``normlab``: ``normlab.patch(model, loss=True)`` (RMSNorm modules and the causal-LM loss);
* ``normlab_split``: as ``normlab``, its loss in the split form (statistics forward, the
  gradient written by the backward), which ``form="auto"`` takes inside torch.compile; eager,
  it takes the chunked form at this vocabulary (the gradient written by the forward);
* ``normlab_chunked``: as ``normlab``, its loss in the chunked form, compiled too (where a
  compiled backward rescales the saved gradient out of place);
* ``normlab_fused``: ``normlab.patch(model, loss=True, fused_add=True)``: as ``normlab``, each
  decoder layer's mid-block residual add inside its post-attention norm (``add_rms_norm``);
* ``normlab_loss``: ``normlab.patch(model, norms=False, loss=True)``: the loss alone, the
  norms left to Hugging Face (and, compiled, to Inductor, which fuses them with the residual
  adds);
* ``liger``: Liger-Kernel's ``apply_liger_kernel_to_llama`` with the same two swaps (RMSNorm
  and cross-entropy; no RoPE, SwiGLU or fused linear cross-entropy), where importable;

each eager and under ``torch.compile`` (default mode). Records per variant: the median step
time over the steps after ``--warmup``, tokens/s, peak memory, and every step's loss (the same
seed, weights and batches in every variant, so the curves must agree to bf16 tolerance).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = ("hf", "normlab", "normlab_fused", "normlab_split", "normlab_chunked", "normlab_loss",
            "liger")
MODES = ("eager", "compile")


def _model(layers: int, seed: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=layers,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                      max_position_embeddings=2048, tie_word_embeddings=True,
                      torch_dtype=torch.bfloat16)  # fmt: skip
    torch.manual_seed(seed)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    return model, cfg


def _profile_step(step, top: int) -> dict:
    """One more step under torch.profiler: the ``top`` kernels by device time (µs, summed over
    their launches in the step) and the step's device total."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    rows = [(e.key, e.self_device_time_total, e.count) for e in prof.key_averages()
            if e.self_device_time_total > 0]  # fmt: skip
    rows.sort(key=lambda r: -r[1])
    return {"device_us": sum(r[1] for r in rows),
            "top": [{"kernel": k[:160], "us": us, "launches": n} for k, us, n in rows[:top]]}


def _dynamo_graphs() -> dict:
    """How many graphs torch.compile made and why it broke them (empty in eager mode)."""
    from torch._dynamo.utils import counters

    return {"unique_graphs": counters["stats"].get("unique_graphs", 0),
            "graph_breaks": dict(counters["graph_break"])}


def run_one(variant: str, mode: str, layers: int, steps: int, warmup: int, batch: int,
            seq: int, seed: int, profile_top: int = 0) -> dict:  # fmt: skip
    import torch

    model, cfg = _model(layers, seed)
    patched = []
    if variant in ("normlab", "normlab_fused", "normlab_split", "normlab_chunked", "normlab_loss"):
        import normlab

        report = normlab.patch(model, norms=variant != "normlab_loss", loss=True,
                               fused_add=variant == "normlab_fused")  # fmt: skip
        patched = (report.replaced + (["loss"] if report.loss else [])
                   + [f"{name} (fused add)" for name in report.fused_add])  # fmt: skip
        if variant in ("normlab_split", "normlab_chunked"):
            import functools

            from normlab.patching import causal_lm_loss

            form = variant.removeprefix("normlab_")
            model.loss_function = functools.partial(causal_lm_loss, form=form)
    elif variant == "liger":
        from liger_kernel.transformers import apply_liger_kernel_to_llama

        apply_liger_kernel_to_llama(rope=False, swiglu=False, cross_entropy=True,
                                    fused_linear_cross_entropy=False, rms_norm=True,
                                    model=model)  # fmt: skip
        patched = ["rms_norm", "cross_entropy"]
    model.train()
    step_model = torch.compile(model) if mode == "compile" else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device="cuda", generator=gen)
    losses, times = [], []

    def step():
        loss = step_model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    torch.cuda.reset_peak_memory_stats()
    for _ in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    step_s = statistics.median(times[warmup:])
    extra = {}
    if profile_top:  # after the timed steps, so the timing is not the profiler's
        extra = {"profile": _profile_step(step, profile_top), "dynamo": _dynamo_graphs()}
    return {
        "variant": variant, "mode": mode, "patched": patched, "layers": layers, "batch": batch,
        "seq": seq, "params": sum(p.numel() for p in model.parameters()),
        "step_ms": step_s * 1e3, "tokens_per_s": batch * seq / step_s,
        "first_step_s": times[0], "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
        "losses": losses, **extra,
    }


def summary_lines(results: list[dict]) -> list[str]:
    """Each variant against Hugging Face's in the same mode: tokens/s, the largest relative loss
    difference over the steps, and (profiled) the device time of one step's kernels, which the
    host's noise does not move."""
    base = {r["mode"]: r for r in results if r.get("variant") == "hf" and "losses" in r}
    lines = []
    for r in results:
        ref = base.get(r.get("mode"))
        if ref and "losses" in r and r is not ref:
            pairs = zip(r["losses"], ref["losses"], strict=True)
            diff = max(abs(a - b) / abs(b) for a, b in pairs)
            speed = r["tokens_per_s"] / ref["tokens_per_s"]
            device = (f"; profiled step's device time {r['profile']['device_us'] / 1e3:.2f} ms "
                      f"against {ref['profile']['device_us'] / 1e3:.2f}"
                      if "profile" in r and "profile" in ref else "")  # fmt: skip
            lines.append(f"{r['variant']} {r['mode']}: tokens/s {speed:.3f}x hf's; max relative "
                         f"loss difference over {len(r['losses'])} steps {diff:.2e}{device}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", default="hf,normlab,liger")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--profile", type=int, default=0, metavar="TOP",
                        help="after the timed steps, profile one step and record its TOP kernels "
                             "by device time, and torch.compile's graph count and breaks")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # "variant:mode", in a child process
    args = parser.parse_args(argv)
    if args.profile < 0:
        parser.error("--profile must be >= 0")
    for name in ("layers", "steps", "batch", "seq"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if not 0 <= args.warmup < args.steps:
        parser.error("--warmup must be in [0, --steps)")
    variants, modes = args.variants.split(","), args.modes.split(",")
    for v in variants:
        if v not in VARIANTS:
            parser.error(f"--variants: {v!r} is not one of {VARIANTS}")
    for m in modes:
        if m not in MODES:
            parser.error(f"--modes: {m!r} is not one of {MODES}")
    import torch

    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (a 1B-parameter model at sequence 2048)")
    common = (args.layers, args.steps, args.warmup, args.batch, args.seq, args.seed, args.profile)
    if args.one:
        variant, mode = args.one.split(":")
        print(json.dumps(run_one(variant, mode, *common)))
        return 0
    if args.out is None:
        parser.error("--out is required")
    from normlab.bench import device_info
    from normlab.bench.records import portable_command

    dev = device_info()
    meta = {"card": dev.card, "torch": dev.torch, "triton": dev.triton, "python": dev.python,
            "commit": os.environ.get("NORMLAB_COMMIT", ""),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": portable_command(["python3", "benchmarks/llama_step.py",
                                         *(argv if argv is not None else sys.argv[1:])])}
    for pkg in ("transformers", "liger_kernel"):
        try:
            meta[pkg] = __import__(pkg).__version__
        except (ImportError, AttributeError):
            pass
    results = []
    for variant in variants:
        for mode in modes:
            cmd = [sys.executable, __file__, "--one", f"{variant}:{mode}",
                   *(f"--{k}={getattr(args, k)}" for k in ("layers", "steps", "warmup", "batch",
                                                           "seq", "seed", "profile"))]  # fmt: skip
            proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
            if proc.returncode != 0:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
                print(f"{variant} {mode}: failed: {tail}", flush=True)
                results.append({"variant": variant, "mode": mode, "error": tail})
            else:
                res = json.loads(proc.stdout.strip().splitlines()[-1])
                results.append(res)
            args.out.parent.mkdir(parents=True, exist_ok=True)  # each result as it comes
            args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
            if "error" in results[-1]:
                continue
            print(f"{variant:8s} {mode:8s} {res['step_ms']:8.1f} ms/step "
                  f"{res['tokens_per_s']:9.0f} tok/s  peak {res['peak_gib']:.1f} GiB  "
                  f"first step {res['first_step_s']:.1f} s  loss[-1] {res['losses'][-1]:.4f}",
                  flush=True)
            for row in res.get("profile", {}).get("top", [])[:12]:
                print(f"    {row['us']:10.0f} us {row['launches']:5d}x  {row['kernel'][:90]}")
            if res.get("dynamo", {}).get("graph_breaks"):
                print(f"    graph breaks: {res['dynamo']['graph_breaks']}")
    for line in summary_lines(results):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
