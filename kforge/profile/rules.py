"""A rule-based performance analyst: one bottleneck, its evidence and one action, from a digest.

Works with no LLM (``analysis=rules``), and is what the LLM analyst is compared against. Rules are
tried in order of how much they usually buy; the first that fits wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from typing import Callable, Iterator

from .digest import Digest


@dataclass
class ProfileFinding:
    rule: str
    bottleneck: str
    evidence: str
    action: str


Rule = Callable[[Digest], "ProfileFinding | None"]
PROFILE_RULES: list[tuple[str, Rule]] = []


def profile_rule(name: str):
    def register(fn: Rule) -> Rule:
        PROFILE_RULES.append((name, fn))
        return fn
    return register


def _m(d: Digest, key: str) -> float | None:
    return d.kernels[0].metrics.get(key) if d.kernels else None


def _pct(x: float | None) -> str:
    return f"{100 * x:.0f}%" if x is not None else "n/a"


@profile_rule("register_spills")
def _spills(d: Digest) -> ProfileFinding | None:
    spill = (_m(d, "local_load_bytes") or 0) + (_m(d, "local_store_bytes") or 0)
    if spill <= 0:
        return None
    regs = _m(d, "registers")
    return ProfileFinding("register_spills", "register spills to local memory",
                   f"the top kernel moves {spill / 1e6:.2f} MB through local memory per call"
                   + (f" with {regs:.0f} registers/thread" if regs else ""),
                   "cut live registers in the top kernel: smaller per-thread tiles or fewer unrolled accumulators, "
                   "index register arrays only with compile-time constants, or cap with __launch_bounds__")


@profile_rule("unfused_launches")
def _launches(d: Digest) -> ProfileFinding | None:
    if d.launches < 2 or d.bound == "compute":
        return None
    names = ", ".join(f"`{k.name[:40]}`" for k in d.kernels[:3])
    return ProfileFinding("unfused_launches", "several kernel launches per call (unfused stages)",
                   f"{d.launches} launches per call ({names}); each round-trips its intermediate through memory",
                   f"fuse the {d.launches} kernels into one pass that keeps intermediates in registers or shared "
                   "memory and writes only the final output")


@profile_rule("tiny_latency_bound")
def _tiny(d: Digest) -> ProfileFinding | None:
    if d.bound != "latency" or d.time_ms >= 0.05:
        return None
    return ProfileFinding("tiny_latency_bound", "launch and host overhead (latency-bound, too little work per call)",
                   f"{d.time_ms * 1e3:.1f} us per call, {d.launches} launch(es)",
                   "do the whole call in a single launch, and take host-side work out of forward (extra "
                   "allocations, .contiguous() copies, Python loops over elements)")


@profile_rule("low_occupancy")
def _occupancy(d: Digest) -> ProfileFinding | None:
    occ = _m(d, "occupancy_pct")
    if occ is None or occ >= 25 or d.bound == "compute":
        return None
    regs, smem = _m(d, "registers"), (_m(d, "smem_static_bytes") or 0) + (_m(d, "smem_dynamic_bytes") or 0)
    block, grid = _m(d, "block_size"), _m(d, "grid_size")
    limits = ", ".join(x for x in (f"{regs:.0f} registers/thread" if regs else "",
                                   f"{smem / 1024:.0f} KB shared memory/block" if smem else "",
                                   f"block {block:.0f}" if block else "", f"grid {grid:.0f}" if grid else "") if x)
    return ProfileFinding("low_occupancy", "low occupancy: too few warps in flight to hide latency",
                   f"achieved occupancy {occ:.0f}% ({limits})",
                   "raise occupancy: launch enough blocks for every SM (several per SM), use 128-256 threads per "
                   "block, and cut registers or shared memory per block where they limit residency")


@profile_rule("memory_inefficient")
def _memory_inefficient(d: Digest) -> ProfileFinding | None:
    frac = d.bandwidth_fraction
    dram = _m(d, "dram_pct")
    if d.bound != "memory":
        return None
    busy = dram / 100 if dram is not None else frac
    if busy is None or busy >= 0.6:
        return None
    return ProfileFinding("memory_inefficient", "memory-bound but far from peak bandwidth (inefficient access)",
                   f"{_pct(frac)} of measured peak bandwidth for the minimum bytes"
                   + (f", DRAM throughput {dram:.0f}% of peak" if dram is not None else ""),
                   "make global memory access coalesced and wide: consecutive threads read consecutive 16-byte "
                   "chunks (float4), each thread keeps several independent loads in flight, no strided or "
                   "repeated reads of the same data")


@profile_rule("memory_roofline")
def _memory_roofline(d: Digest) -> ProfileFinding | None:
    if d.bound != "memory":
        return None
    return ProfileFinding("memory_roofline", "at the memory roofline: bytes moved set the time",
                   f"{_pct(d.bandwidth_fraction)} of peak bandwidth; speed of light {_pct(d.speed_of_light)}",
                   "move fewer bytes: read each input once and write only the output (fuse the stages, recompute "
                   "cheap values instead of storing them), keep reused data in shared memory or registers")


@profile_rule("memory_latency_stalls")
def _long_scoreboard(d: Digest) -> ProfileFinding | None:
    stalls = d.kernels[0].stalls if d.kernels else []
    dram = _m(d, "dram_pct")
    if not stalls or stalls[0][0] != "long_scoreboard" or (dram is not None and dram >= 60):
        return None
    return ProfileFinding("memory_latency_stalls", "warps wait on global memory loads",
                   f"top stall: long_scoreboard {stalls[0][1]:.2f} cycles/instruction",
                   "overlap loads with compute: prefetch the next tile while computing the current one "
                   "(double-buffer in shared memory or registers) and issue independent loads back to back")


@profile_rule("barrier_stalls")
def _barrier(d: Digest) -> ProfileFinding | None:
    stalls = d.kernels[0].stalls if d.kernels else []
    if not stalls or stalls[0][0] not in ("barrier", "membar"):
        return None
    return ProfileFinding("barrier_stalls", "warps wait at barriers",
                   f"top stall: {stalls[0][0]} {stalls[0][1]:.2f} cycles/instruction",
                   "synchronise less: reduce within a warp with shuffles, and keep one __syncthreads per stage")


@profile_rule("data_reuse")
def _reuse(d: Digest) -> ProfileFinding | None:
    if d.bound != "compute" or not d.intensity or d.intensity < 20:
        return None
    cf = d.compute_fraction
    if cf is not None and cf >= 0.6:
        return None
    return ProfileFinding("data_reuse", "compute-bound work without enough data reuse",
                   f"{_pct(cf)} of the measured matmul rate at intensity {d.intensity:.0f} FLOP/B",
                   "tile for reuse: stage block tiles of both operands in shared memory (e.g. 128x128 with a K "
                   "step of 16-32), give each thread a register tile of outputs (e.g. 8x8), and double-buffer "
                   "the shared-memory loads")


@profile_rule("arithmetic")
def _arith(d: Digest) -> ProfileFinding | None:
    if d.bound != "compute":
        return None
    return ProfileFinding("arithmetic", "arithmetic throughput", f"compute-bound at {_pct(d.compute_fraction)} of the "
                   "measured rate" + (f", SM busy {_m(d, 'sm_pct'):.0f}%" if _m(d, "sm_pct") is not None else ""),
                   "do fewer instructions per output: hoist index arithmetic out of inner loops, unroll the inner "
                   "loop, and replace expensive functions where an exact cheaper form exists")


@profile_rule("tensor_cores")
def _tensor_cores(d: Digest) -> ProfileFinding | None:
    """At a reduced precision, matrix work off the tensor cores leaves most of the chip's rate unused (an H100:
    ~990 TFLOP/s bf16 on tensor cores against ~67 fp32 on CUDA cores)."""
    if d.precision == "fp32" or d.device.startswith("cpu") or not d.kernels or not d.flops:
        return None
    if d.ridge is not None and d.intensity is not None and d.intensity < d.ridge / 4:
        return None  # memory work: the tensor cores would not help
    tensor = _m(d, "tensor_pct")
    if tensor is not None and tensor >= 10:
        return None
    seen = f"tensor pipe {tensor:.0f}% busy in the top kernel" if tensor is not None else \
        "no tensor-pipe counter read (the profile has none)"
    return ProfileFinding("tensor_cores", f"{d.precision} matrix work off the tensor cores",
                          f"{seen}; {_pct(d.compute_fraction)} of the measured {d.precision} matmul rate",
                          "do the products on tensor cores: in Triton `tl.dot` on bf16/fp16 tiles with an fp32 "
                          "accumulator; in CUDA WMMA (`nvcuda::wmma`) or `mma.sync`/`wgmma` fragments, operands "
                          "staged in shared memory, fp32 accumulation")


@profile_rule("cpu_own_code")
def _cpu(d: Digest) -> ProfileFinding | None:
    if not d.device.startswith("cpu") or not d.kernels:
        return None
    top = d.kernels[0]
    if top.name.startswith("candidate code"):
        return ProfileFinding("cpu_own_code", "the kernel's own loops", f"{_pct(top.share)} of the call is the candidate's "
                       f"C++ ({top.time_ms:.3f} ms)", "vectorise the inner loop (contiguous, branch-free, so the "
                       "compiler emits SIMD), parallelise the outer loop with OpenMP, and block loops so the working "
                       "set stays in cache")
    return ProfileFinding("cpu_overhead", "PyTorch operators around the kernel", f"`{top.name}` takes {_pct(top.share)} of "
                   f"the call ({top.time_ms:.3f} ms)", f"remove `{top.name}` from forward: allocate once, avoid "
                   "copies and conversions, do the work inside the kernel")


#: Tried in this order: what usually buys most first; specific evidence (stalls) before general advice.
ORDER = ("tensor_cores", "register_spills", "unfused_launches", "tiny_latency_bound", "low_occupancy", "memory_latency_stalls",
         "barrier_stalls", "memory_inefficient", "memory_roofline", "data_reuse", "arithmetic", "cpu_own_code")
PROFILE_RULES.sort(key=lambda r: ORDER.index(r[0]))


def _fitting(d: Digest) -> Iterator[ProfileFinding]:
    """The rules that fit, best first, each tried only when the one before is passed over."""
    # A CPU profile is an operator table, not hardware counters: only the CPU rule reads it.
    for name, fn in PROFILE_RULES:
        if name.startswith("cpu") == d.device.startswith("cpu"):
            found = fn(d)
            if found is not None:
                yield found


def _generic(d: Digest) -> ProfileFinding:
    return ProfileFinding("generic", "no clear bottleneck in the profile", f"{d.bound}-bound, {d.time_ms:.4f} ms per call",
                   "find the largest remaining cost (memory traffic, launches, arithmetic) and remove it")


def classify(d: Digest) -> ProfileFinding:
    """The first rule that fits (one recommendation per optimisation pass)."""
    return next(_fitting(d), None) or _generic(d)


def findings(d: Digest, k: int) -> list[ProfileFinding]:
    """Up to ``k`` distinct rules that fit, best first (beam search asks for several directions at once);
    the generic finding when none does."""
    return list(islice(_fitting(d), k)) or [_generic(d)]
