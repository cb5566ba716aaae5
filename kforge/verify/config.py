"""Verifier settings. Every field is also a Hydra key under ``verify.`` (conf/verify/default.yaml)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ConfigError
from ..precision import PRECISIONS
from ..strict import StrictConfig, from_dict

RULE_SETS = ("kforge", "kernelbench", "strict")
"""The rule sets a verdict is decided under (`kforge.verify.rules` says what each asks)."""

#: Default tolerances by dtype, as (atol, rtol) for ``|out - ref| <= atol + rtol * |ref|``, where the reference is
#: computed in the output's own dtype (a reduced ``verify.precision`` judges against float32 instead:
#: `kforge.precision.tolerance`).
#: float32 follows KernelBench (1e-4): a kernel in true fp32 lands far inside it, while a silent
#: downgrade to TF32/fp16/bf16 arithmetic (errors of 1e-3 and more) does not pass. Half types get
#: 1e-2, KernelBench's value, since their own rounding is ~4e-3 (bf16) / ~5e-4 (fp16).
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (1e-2, 1e-2),
}


@dataclass
class StaticConfig(StrictConfig):
    """Which static rules run, plus pattern deny/allow lists (``verify.static`` in Hydra)."""

    require_kernel: bool = True
    """The candidate must contain a kernel in its backend's language and call it from forward (the
    verifier sets it from ``verify.require_kernel``; not a Hydra key of its own)."""
    disabled: list[str] = field(default_factory=list)
    """Rule names to skip."""
    deny: list[str] = field(default_factory=list)
    """Regexes: a candidate whose source matches one is rejected (rule ``deny_pattern``)."""
    allow: list[str] = field(default_factory=list)
    """Regexes: a finding whose source line (or message) matches one is dropped."""
    warn_only: list[str] = field(default_factory=list)
    """Rule names reported without rejecting."""


@dataclass
class TimingConfig(StrictConfig):
    """How candidates and references are timed."""

    warmup: int = 3
    """Untimed calls per program before measuring (the compile reference compiles on its first)."""
    min_trials: int = 10
    """Timed rounds at least (each round times the eager reference, torch.compile and the candidate)."""
    max_trials: int = 200
    """Timed rounds at most."""
    target_rel_err: float = 0.01
    """Stop once every program's median has this relative standard error or less."""
    budget_s: float = 10.0
    """Stop after this many seconds of timing even if the medians are not that stable."""
    limit_s: float = 60.0
    """The whole timing phase (warm-up, compiling the compile reference, rounds) stops here whatever the round count,
    and its spread is reported; less where the run's ``timeout_s`` leaves less (kforge's own time, never the
    candidate's timeout)."""
    input_sets: int = 3
    """Input sets rotated between rounds, so no cache carries one round's data into the next."""
    recheck_every: int = 4
    """After rounds N, 2N, 4N, ... refill one input set in place with fresh values and check the output."""
    flush_l2: bool = True
    """Overwrite a buffer larger than the L2 cache before every timed GPU call."""


@dataclass
class VerifyConfig(StrictConfig):
    """Everything the verifier needs besides the problem, the candidate and the backend."""

    trials: int = 5
    """Correctness trials, each on fresh random inputs from a seed the candidate cannot see. With ``attribution``
    the last two run after timing and also measure whose code did the work (with fewer asked: one before, two after)."""
    atol: float | None = None
    """Absolute tolerance override (None: the dtype default, or the problem's own)."""
    rtol: float | None = None
    """Relative tolerance override (None: the dtype default, or the problem's own)."""
    timeout_s: float = 300.0
    """Wall-clock limit for the run phase (loading, correctness, timing); the process group is killed. kforge's own
    phases keep within it (``timing.limit_s``, ``attribution_budget_s``); a run stopped in them after its correctness
    trials passed is judged from what it established, not charged with a timeout."""
    build_timeout_s: float = 900.0
    """Wall-clock limit for the build phase (compiling the candidate's extensions)."""
    device_busy_wait_s: float = 300.0
    """How long a run that ran out of device memory other processes held is tried again before the verification
    gives up without a verdict (`kforge.sandbox.memory`; 0: not tried again)."""
    compile_ref: bool = True
    """Also time ``torch.compile`` of the reference (slow to compile on CPU: inductor builds C++)."""
    compile_ref_reuse: bool = True
    """Time the compile reference once per problem, device model and torch version and reuse that median in this
    process, and for a week in later ones as its ratio to eager (``<cache>/compile_ref/``; KernelBench stores
    its baselines likewise); False re-times it, interleaved, in every verification."""
    compile_mode: str | None = None
    """``torch.compile`` mode for the compile reference (None is inductor's default)."""
    precision: str = "fp32"
    """The precision the workload runs in (`kforge.precision`): ``fp32`` (the file as written), ``tf32`` (float32
    storage, tensor-core matrix work), ``bf16`` or ``fp16`` (floating inputs and parameters cast, as KernelBench's
    ``precision=`` does). The baselines are timed in it; the verdict records it."""
    rules: str = "kforge"
    """The rule set that decides a verdict's state (`kforge.verify.rules`): ``kforge`` (the candidate's own kernels
    must do the work), ``kernelbench`` (what KernelBench's harness decides: matching outputs suffice) or ``strict``
    (``kforge`` and a minimum kernel share). Every verdict records its state under all three."""
    require_kernel: bool = True
    """The candidate's own kernels must do the work under the ``kforge`` and ``strict`` rules: measured at run time
    (`attribution`), or by static rules; False makes them ask what ``kernelbench`` asks."""
    attribution: bool = True
    """Measure what ran in the candidate's forward (one profiled and one traced correctness trial) and judge by
    it: its own kernels ran, an output derives from them, it does not re-run the reference in PyTorch."""
    attribution_budget_s: float = 60.0
    """Seconds the measured trials (profile, dataflow, the reference's dead code) may take together; when spent the
    work is judged from what was measured, with a note (less where the run's ``timeout_s`` leaves less)."""
    min_kernel_share: float = 0.0
    """Also demand this share of the forward's device time in the candidate's own kernels (0: off, and 0.9 under
    the ``strict`` rules; the ``verify=strict`` preset asks for 0.9). Library calls (cuBLAS, cuDNN) count against
    it; a candidate below it is ``kernel_unused``, not a cheat."""
    variants: bool = True
    """Also check a correct candidate on the problem's shape variants (`kforge.verify.variants`: sizes it was not
    shown); the kforge and strict rules ask that it be correct there too, KernelBench's do not."""
    audit: bool = True
    """Audit the problem before its first verification on a device (stochastic, degenerate, launch-bound,
    memory, FLOPs and bytes); cached in kforge's cache directory."""
    seed: int | None = None
    """Fix the secret seed (for debugging); None draws a fresh one from os.urandom every verification."""
    cpu_threads: int | None = None
    """Intra-op threads for CPU work in the worker (None: PyTorch's default)."""
    timing: TimingConfig = field(default_factory=TimingConfig)
    """How timing is done."""
    skip_timing: bool = False
    """Only check correctness (no speedups)."""
    backward: bool = False
    """Judge a training step, not the forward alone: floating inputs and parameters require grad, a seeded random
    upstream gradient is applied to the outputs, and the candidate must give the outputs and every gradient autograd
    gives on the reference (`kforge.verify.backward`); timing and kernel share cover forward plus backward."""
    static: StaticConfig = field(default_factory=StaticConfig)
    """Static rules: ``disabled``, ``deny``/``allow`` regex lists, ``warn_only`` (``verify.static.deny=[...]``)."""

    def __post_init__(self) -> None:
        # One switch for "a kernel is required": verify.require_kernel; the static rules follow it.
        self.static = replace(self.static, require_kernel=self.require_kernel)
        if self.rules not in RULE_SETS:
            raise ConfigError(f"verify.rules={self.rules!r} is not a rule set (valid: {', '.join(RULE_SETS)})")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"verify.precision={self.precision!r} is not a precision (valid: "
                              f"{', '.join(PRECISIONS)})")
        # A negative limit killed an honest candidate as a `timeout`; a negative tolerance failed an exact one.
        for name in ("timeout_s", "build_timeout_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"verify.{name}={getattr(self, name)!r} must be positive (seconds)")
        for name in ("trials", "device_busy_wait_s", "attribution_budget_s", "atol", "rtol"):
            value = getattr(self, name)
            if value is not None and not value >= 0:  # NaN too: it failed an exact candidate at fp32
                raise ConfigError(f"verify.{name}={value!r} must be a number, not negative")
        if not 0.0 <= self.min_kernel_share <= 1.0:
            raise ConfigError(f"verify.min_kernel_share={self.min_kernel_share!r} must be a share, 0 to 1")

    @classmethod
    def from_dict(cls, data: Any, where: str = "") -> "VerifyConfig":
        # A verify.static.require_kernel that disagrees would be overridden by verify.require_kernel
        # without a word: refuse it, as the strict helper refuses an unknown key.
        static = data.get("static") if isinstance(data, Mapping) else None
        if isinstance(static, Mapping) and "require_kernel" in static and \
                static["require_kernel"] != data.get("require_kernel", True):
            raise ConfigError(f"{where or 'verify'}.static.require_kernel is not a setting of its own: set "
                              f"{where or 'verify'}.require_kernel instead")
        return from_dict(cls, data, where)

    def tolerance(self, dtype_name: str, problem_tol: dict[str, float] | None = None) -> tuple[float, float]:
        """(atol, rtol) for an output dtype: explicit override > problem's own > dtype default."""
        atol, rtol = DEFAULT_TOLERANCES.get(dtype_name, (1e-4, 1e-4))
        if problem_tol:
            atol, rtol = problem_tol.get("atol", atol), problem_tol.get("rtol", rtol)
        return (self.atol if self.atol is not None else atol, self.rtol if self.rtol is not None else rtol)
