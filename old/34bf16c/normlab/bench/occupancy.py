"""How many programs of a compiled kernel fit on one SM at once, from its registers and warps.

A memory-bound kernel hides DRAM latency with loads in flight, so with more programs resident per
SM it usually runs faster, until one of an SM's limits is reached. The limits of compute capability
9.0 (H100, H200), from the CUDA C++ Programming Guide's table "Technical Specifications per
Compute Capability" (https://docs.nvidia.com/cuda/cuda-c-programming-guide/#features-and-technical-specifications)
and the CUDA Occupancy Calculator's register allocation rule (registers are given to each warp
in units of 256), are ``SM90``.
"""

from __future__ import annotations

from typing import NamedTuple


class SMLimits(NamedTuple):
    registers: int  # 32-bit registers per SM
    max_warps: int  # resident warps per SM
    max_programs: int  # resident thread blocks (Triton programs) per SM
    register_unit: int  # registers are allocated per warp in multiples of this
    max_registers_per_thread: int
    shared_bytes: int  # shared memory per SM usable by thread blocks


SM90 = SMLimits(registers=65536, max_warps=64, max_programs=32, register_unit=256,
                max_registers_per_thread=255, shared_bytes=227 * 1024)
WARP = 32


def registers_per_warp(n_regs: int, limits: SMLimits = SM90) -> int:
    """Registers one warp is given: n_regs per thread x 32 threads, rounded up to the unit."""
    unit = limits.register_unit
    return -(-n_regs * WARP // unit) * unit


def programs_per_sm(n_regs: int, num_warps: int, shared_bytes: int = 0,
                    limits: SMLimits = SM90) -> int:  # fmt: skip
    """Programs of ``num_warps`` warps at ``n_regs`` registers per thread (and ``shared_bytes``
    of shared memory each) resident on one SM: the smallest of the register, warp, program and
    shared-memory limits."""
    for name, v in (("n_regs", n_regs), ("num_warps", num_warps)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if n_regs > limits.max_registers_per_thread:
        raise ValueError(f"n_regs={n_regs} exceeds {limits.max_registers_per_thread} per thread")
    if shared_bytes < 0:
        raise ValueError(f"shared_bytes must be >= 0, got {shared_bytes}")
    by_regs = limits.registers // (registers_per_warp(n_regs, limits) * num_warps)
    by_warps = limits.max_warps // num_warps
    by_shared = limits.shared_bytes // shared_bytes if shared_bytes else limits.max_programs
    return min(by_regs, by_warps, limits.max_programs, by_shared)


def occupancy(n_regs: int, num_warps: int, shared_bytes: int = 0,
              limits: SMLimits = SM90) -> float:  # fmt: skip
    """Resident warps over the SM's maximum (the "theoretical occupancy" profilers report)."""
    return programs_per_sm(n_regs, num_warps, shared_bytes, limits) * num_warps / limits.max_warps


def compiled_kernels(kernel) -> list[dict]:
    """What Triton compiled for ``kernel`` in this process: per compiled variant its name, warps,
    registers and spills per thread, shared memory and the programs per SM they allow. [] under
    the interpreter (nothing is compiled) or when this Triton keeps its cache elsewhere."""
    fn = kernel
    while not hasattr(fn, "device_caches") and hasattr(fn, "fn"):  # heuristics / autotune
        fn = fn.fn
    out = []
    for caches in getattr(fn, "device_caches", {}).values():
        cache = caches[0] if isinstance(caches, tuple) else caches
        for compiled in getattr(cache, "values", list)():
            init = getattr(compiled, "_init_handles", None)
            if init is not None:
                init()
            n_regs = getattr(compiled, "n_regs", None)
            n_spills = getattr(compiled, "n_spills", None)
            meta = getattr(compiled, "metadata", None)
            warps = getattr(meta, "num_warps", None)
            shared = getattr(meta, "shared", 0) or 0
            out.append({
                "name": getattr(compiled, "name", getattr(fn, "__name__", "?")),
                "num_warps": warps, "n_regs": n_regs, "n_spills": n_spills, "shared_bytes": shared,
                "programs_per_sm": (programs_per_sm(n_regs, warps, shared)
                                    if n_regs and warps else None),
            })
    return out
