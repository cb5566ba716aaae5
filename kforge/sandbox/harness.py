"""Loading a problem and a candidate inside a worker's child: the part verifying and profiling share.

Order matters: numerics, device and the trusted clock are set up, the reference model is built, and
only then is candidate code imported (with the tripwire's snapshot taken and the write guard installed
just before).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import secrets
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any, Protocol

from ..backends import WorkerContext, from_spec
from ..backends.clocks import l2_flush_bytes
from ..precision import get_precision
from .budget import BudgetSpent
from .imports import import_candidate, import_file, problem_frames
from .memory import DeviceBusy, busy_after
from .progress import candidate_code, phase
from .protocol import ProgramRequest
from .writeguard import WriteGuard, install_write_guard

TAIL = 6000


PROBLEM_ERROR = "problem_error"
"""A reply state that is no verdict: the problem itself failed (its Model, get_inputs or get_init_inputs)."""
NO_CUDA = ("Torch not compiled with CUDA enabled", "Found no NVIDIA driver", "no CUDA GPUs are available",
           "CUDA driver initialization failed")
"""What torch says when a program asks for CUDA where there is none."""


def tail(text: str, n: int = TAIL) -> str:
    return text if len(text) <= n else "..." + text[-n:]


def _as_if_dynamo_imported(torch) -> None:
    """Importing ``torch._dynamo`` rebinds ``torch.manual_seed`` (its one change to what the tripwire watches).
    Do it before the tripwire's snapshot, so that a candidate or the compile reference importing dynamo later
    changes nothing: the way torch itself does it, which costs nothing, where importing dynamo costs seconds
    (5 s in a worker on an H100) that a light worker (`WorkerPool.light`) saves. The wrapper imports dynamo
    when first called, so the harness seeds through ``torch.random.manual_seed``, the function it wraps."""
    if "torch._dynamo" in sys.modules or torch.manual_seed is not torch.random.manual_seed:
        return
    if not hasattr(torch, "_disable_dynamo"):
        import torch._dynamo  # noqa: F401
        return
    import torch.jit._builtins
    torch.manual_seed = torch._disable_dynamo(torch.manual_seed)
    torch.jit._builtins._register_builtin(torch.manual_seed, "aten::manual_seed")


class HarnessVerdict(Exception):
    """Raised inside a run to stop with a verdict."""

    def __init__(self, state: str, message: str, **extra: Any):
        super().__init__(message)
        self.state, self.message, self.extra = state, message, extra


class HarnessConfig(Protocol):
    """What the harness reads of the run's configuration (the verifier's `VerifyConfig` has all of it)."""

    seed: int | None
    cpu_threads: int | None
    precision: str
    """`kforge.precision`: the dtype inputs and models are cast to."""
    rules: str
    """Under ``kernelbench`` every tensor input is cast to the precision's dtype, integers too, as KernelBench
    casts them; otherwise only floating ones."""


class Harness:
    """Loads a problem and a candidate in this process, the same way for verifying and for profiling."""

    WATCHED: tuple[tuple[str, str], ...] = tuple((module, name) for module in ("kforge.sandbox.harness",
                                                                             "kforge.sandbox.imports")
                                                 for name in ("import_file", "import_candidate"))
    """What the tripwire watches besides its own list: the harness's functions (a subclass adds its own)."""

    def __init__(self, req: ProgramRequest, cfg: HarnessConfig):
        self.req = req
        self.cfg = cfg
        self.problem = req.problem
        self.backend = from_spec(req.backend)
        seed = self.cfg.seed
        self.rng = random.Random(seed) if seed is not None else secrets.SystemRandom()
        self.notes: list[str] = []
        self.writes: WriteGuard | None = None
        """Where the candidate may write (installed with its import)."""

    def draw(self) -> int:
        return self.rng.randrange(1 << 62)

    def setup(self, flush_l2: bool = True, failed_builds: dict[str, str] | None = None) -> None:
        """Numerics, device, trusted clock, backend — all before any candidate code is imported. Builds in
        ``failed_builds`` (the build phase saw them fail) fail at once instead of compiling again."""
        import torch
        _as_if_dynamo_imported(torch)
        self.torch = torch
        warnings.filterwarnings("ignore", message=".*[Dd]eterministic.*")
        from .settings import Settings
        self.settings = Settings(torch)  # PyTorch's defaults, read before anything changes them
        # Correctness in true fp32: TF32 would make the reference ~1e-3 off and excuse the same in a candidate.
        # The thread count is always set: after fork, torch's and a candidate's OpenMP regions disagree on it
        # until this is called (measured: 8 ms instead of 2 us for a tiny OpenMP loop).
        self.precision = get_precision(self.cfg.precision)
        self.storage = getattr(torch, self.precision.storage)
        self.cast_all = self.cfg.rules == "kernelbench"
        self.settings.use_strict(threads=self.cfg.cpu_threads or torch.get_num_threads(),
                                 tf32=self.precision.name == "tf32")
        self.device = torch.device(self.backend.device)
        phase("setup: device")  # the CUDA context is made here, in each child (it cannot survive a fork)
        if self.device.type == "cuda":
            torch.cuda.set_device(0)
        flush = l2_flush_bytes() if self.device.type == "cuda" and flush_l2 else 0
        self.clock = self.backend.make_clock(flush)  # trusted: made before any candidate code exists
        phase("setup: backend")
        self.backend.prepare(WorkerContext(cache_dir=self.req.cache_dir, arch=self.req.arch))
        if getattr(self.backend, "builder", None) is not None:
            self.backend.builder.known_failures = dict(failed_builds or {})
        from .recorder import Recorder
        self.recorder = Recorder()  # wraps what the backend installed, before the tripwire's snapshot
        self.recorder.install()

    def device_name(self) -> str:
        return self.torch.cuda.get_device_name(0) if self.device.type == "cuda" else cpu_name()

    def load_reference(self) -> None:
        torch = self.torch
        step = "importing the problem"
        try:
            self.ref_mod = import_file("problem.py", "kforge_reference")
            self.weight_seed = self.draw()
            torch.random.manual_seed(self.weight_seed)
            step = "get_init_inputs()"
            with torch.device(self.device):
                self.init_inputs = [self.cast(x) for x in self.listed(self.ref_mod.get_init_inputs(), step)]
            step = "Model(*get_init_inputs())"
            self.build_references()
            step = "get_inputs()"
            drawn = self.inputs(self.draw())  # before any candidate code: a failure here is the problem's alone
            self.input_dtypes = {str(x.dtype).replace("torch.", "") for x in drawn if isinstance(x, torch.Tensor)}
        except Exception as exc:  # noqa: BLE001
            self.raise_if_busy(exc)
            raise HarnessVerdict(PROBLEM_ERROR, f"the problem fails in {step} ({type(exc).__name__}: "
                                 f"{first_line(exc)}){self._no_cuda_note(exc)}; {self.blame()}{self.cast_note(exc)}",
                                 evidence={"traceback": self.problem_traceback(exc)}) from None

    def problem_traceback(self, exc: BaseException) -> str:
        """The traceback of an exception the problem raised, as its author reads it: from the first frame in the
        problem's file on (the harness's frames before it are no help to them), the file under its own path."""
        return tail(problem_frames(exc, self.problem.path or self.problem.key))

    def _no_cuda_note(self, exc: BaseException) -> str:
        """Where a problem asks for CUDA on a machine without it (``.cuda()`` in its ``get_inputs``): how to run it."""
        text = str(exc)
        if self.device.type == "cuda" or not any(s in text for s in NO_CUDA):
            return ""
        return (": it puts tensors on CUDA and this worker runs on the CPU; create them on the CPU (kforge moves "
                "inputs and models to the device it verifies on) or verify on a GPU backend")

    # -- pieces ------------------------------------------------------------------------------------
    def _construct(self, cls):
        """As KernelBench builds both models: seeded, on the CPU, then moved to the device. Parameters drawn in
        the same order then get the same values however a model creates them; built under a device context,
        a candidate's ``nn.Parameter(torch.Tensor(...))`` (legacy constructors ignore the context) drew from
        the CPU's generator and the reference from the GPU's (seen on 8 published H100 kernels)."""
        torch = self.torch
        torch.random.manual_seed(self.weight_seed)
        model = cls(*self.init_inputs)
        if not hasattr(model, "to"):
            return model
        # Both models are cast as KernelBench's precision= casts them (floating parameters and buffers).
        return model.to(self.device, dtype=self.storage) if self.precision.reduced or self.cast_all \
            else model.to(self.device)

    def build_references(self) -> None:
        """The reference model in the precision (``ref_model``) and the kforge rules' one (``ref_exact``): at a
        reduced precision the same rounded weights held in float32, else the same model, or a copy of it where a
        trial runs both and the problem keeps state between calls (each must be called once a trial)."""
        self.ref_model = self._construct(self.ref_mod.Model)
        if self.precision.reduced and hasattr(self.ref_model, "to"):
            self.ref_exact = self._exact_copy()
        elif getattr(self, "stateful", False) and getattr(self, "native_differs", False):
            self.ref_exact = self._exact_copy(keep_dtype=True)
        else:
            self.ref_exact = self.ref_model

    def _exact_copy(self, keep_dtype: bool = False):
        """``ref_model`` copied and held in float32 (``keep_dtype``: as it is). Building it again, seeded alike, gives
        the same weights at the cost of another initialisation on the CPU, about a third of the reference's time for
        KernelBench's 32768 x 32768 Linears, paid again at every shape variant; a model that cannot be copied is
        built again."""
        import copy
        try:
            model = copy.deepcopy(self.ref_model)
        except Exception:  # noqa: BLE001 - the problem's own objects: a second build is the same model
            model = self._construct(self.ref_mod.Model)
        return model if keep_dtype else model.to(dtype=self.torch.float32)

    def blame(self, what: str = "a bug in the problem", whose: str = "not in the candidate") -> str:
        """Whose failure one of the problem on its own is: the file's, or that of the constants ``--set`` (or a
        config's overrides) put on top of its own (``dim=63`` a reshape cannot take)."""
        if not self.problem.overrides:
            return f"this is {what}, {whose}"
        said = ", ".join(f"{k}={v!r}" for k, v in self.problem.overrides.items())
        return (f"the problem fails at {said}, set on top of its own sizes (--set or a config's overrides), not in the "
                "candidate: try other values, or none")

    def cast_note(self, exc: BaseException | None = None) -> str:
        """For a reference that fails: what the precision or the kernelbench rules did to its inputs, which may be
        why (``torch.linalg.det`` has no bf16 kernel on a CPU: "lu_cpu" not implemented for 'BFloat16')."""
        name = {"bfloat16": "BFloat16", "float16": "Half"}.get(self.precision.storage)
        said = str(exc) if exc is not None else ""
        if name and (f"not implemented for '{name}'" in said or f"Unsupported dtype {name}" in said):
            return (f" (or rather of the precision: PyTorch has no {self.precision.name} kernel for one of the "
                    "problem's operators on this device, and the problem runs at --precision fp32)")
        if not self.cast_all:
            return ""
        dtype = str(self.storage).replace("torch.", "")
        return (f" (the kernelbench rules cast every input tensor to {dtype}, integer ones too, as KernelBench's "
                "harness does; the kforge rules cast floating-point ones only)")

    def cast(self, x: Any) -> Any:
        """An input as the precision has it: floating tensors in its dtype (every tensor, under KernelBench's
        rules, which cast integer and boolean inputs too)."""
        torch = self.torch
        if isinstance(x, torch.Tensor) and ((self.precision.reduced and x.is_floating_point()) or self.cast_all):
            return x.to(dtype=self.storage)
        return x

    def inputs(self, seed: int) -> list[Any]:
        torch = self.torch
        torch.random.manual_seed(seed)
        with torch.device(self.device):
            inputs = self.listed(self.ref_mod.get_inputs(), "get_inputs()")
        return [self.cast(x.to(self.device)) if isinstance(x, torch.Tensor) else x for x in inputs]

    def listed(self, value: Any, fn: str) -> list[Any]:
        """What ``get_inputs()`` (or ``get_init_inputs()``) returned, as the arguments it lists. A tensor, None or a
        mapping is the problem's mistake, said as such: ``list(tensor)`` made each of its rows an argument
        ("forward() takes 2 positional arguments but 17 were given")."""
        if value is None:
            raise TypeError(f"{fn} returned None, not a list of arguments (a missing return?)")
        if isinstance(value, self.torch.Tensor):
            raise TypeError(f"{fn} returned a tensor, not a list of arguments: return [x] (listed, each of its "
                            f"{len(value) if value.dim() else 0} rows would be an argument)")
        if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
            raise TypeError(f"{fn} returned a {type(value).__name__}, not a list of arguments")
        return list(value)

    def _clone(self, inputs: list[Any]) -> list[Any]:
        return [x.clone() if isinstance(x, self.torch.Tensor) else x for x in inputs]

    def raise_if_busy(self, exc: BaseException) -> None:
        """Raise `DeviceBusy` where ``exc`` ran out of device memory that other processes held
        (`kforge.sandbox.memory`): before an error becomes anyone's verdict."""
        busy = busy_after(self.torch, exc, getattr(self, "device", None))
        if busy is not None:
            raise busy from exc

    def _fail_exception(self, exc: BaseException, where: str) -> HarnessVerdict | BudgetSpent | DeviceBusy:
        if isinstance(exc, BudgetSpent):  # the harness's own phase ran out of time, not the candidate's failure
            return exc
        from ..backends.build import CompilationError
        from ..backends.diagnose import cause_in
        refused = self.writes.finding() if self.writes is not None else None
        if refused:  # the candidate failed because it was refused a write: that write is the verdict
            return HarnessVerdict("cheat_detected", f"{refused[1]} ({where})", rule=refused[0])
        busy = busy_after(self.torch, exc, getattr(self, "device", None))
        if busy is not None:  # the machine's load, not the candidate's failure
            return busy
        if isinstance(exc, CompilationError):
            cause = cause_in(exc.log)
            return HarnessVerdict("compilation_failure", f"the candidate's extension does not build ({where})"
                                  + (f": {cause}" if cause else ""), evidence={"compiler_log": tail(exc.log)})
        state = self.backend.classify(exc)
        tb = tail("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        shown = self.backend.quoted(exc)
        if state == "compilation_failure":
            return HarnessVerdict(state, f"the candidate's kernel does not compile ({where}): {first_line(shown)}",
                            evidence={"compiler_log": tb})
        if isinstance(exc, SyntaxError):
            return HarnessVerdict("compilation_failure", f"Python syntax error in the candidate: line {exc.lineno}: "
                            f"{exc.msg}", evidence={"compiler_log": tb})
        # "CUDA error: ..." (an illegal address), not any message naming CUDA ("x must be a CUDA tensor")
        cuda = "CUDA error" in str(shown) or "cuda" in type(shown).__name__.lower()
        kind = "CUDA error" if cuda else type(shown).__name__
        hint = self._dtype_hint(shown) or self.backend.hint("runtime", self.candidate_source(), str(shown),
                                                            self.precision.name)
        return HarnessVerdict("runtime_error", f"{kind} {where}: {first_line(shown)}{hint}", evidence={"traceback": tb})

    @staticmethod
    def candidate_source() -> str:
        """The candidate's program, as the run was given it (its working directory's ``candidate.py``)."""
        path = Path("candidate.py")
        try:
            return path.read_text() if path.is_file() else ""
        except (OSError, UnicodeDecodeError):
            return ""

    #: How a dtype failure reads: PyTorch's own words, and a candidate's own check (``TORCH_CHECK(a.dtype() ==
    #: torch::kFloat32, "A must be a float32 tensor")``).
    _DTYPES = re.compile(r"scalar type|dtype|BFloat16|bfloat16|\bHalf\b|float16|\bbf16\b|\bfp16\b|float32|\bfloat\b|"
                         r"kFloat", re.I)

    def _dtype_hint(self, exc: BaseException) -> str:
        """Where a candidate fails on a dtype at a reduced precision: what the precision made its tensors."""
        if not self.precision.reduced or not self._DTYPES.search(str(exc)):
            return ""
        dtype = str(self.storage).replace("torch.", "")
        if "unsupported ScalarType BFloat16" in str(exc):  # tensor.numpy() on a bf16 tensor
            return (" (the problem runs at bf16 and NumPy has no bfloat16: take `.float()` before `.numpy()`, or "
                    "`.view(torch.int16)` for the raw bits, and give the result back as `.to(torch.bfloat16)`)")
        return (f" (the problem runs at {self.precision.name}: its inputs, parameters and buffers are {dtype}; a "
                f"kernel written for one dtype needs them dispatched on their dtype or cast, and a tensor held as a plain "
                f"attribute, not a parameter or buffer, is not cast with the model)")

    def guard_candidate(self) -> None:
        """The tripwire's snapshot (everything the harness set up is the baseline) and the write guard, just
        before candidate code is imported."""
        from .tripwire import Tripwire
        self.tripwire = Tripwire(self.WATCHED)
        self.writes = install_write_guard(os.getcwd(), self.req.cache_dir)

    def load_candidate(self):
        self.guard_candidate()
        try:
            mod = import_candidate()
        except BaseException as exc:  # noqa: BLE001 - SystemExit from a candidate is its error too
            raise self._fail_exception(exc, "while importing the candidate") from None
        if not hasattr(mod, "ModelNew"):  # as KernelBench reads it: whatever the executed program bound to the name
            from ..candidate import bound_under_main_only
            where = (": its only binding is under `if __name__ == \"__main__\":`, which a harness executing the program "
                     "never enters; bind it at module level" if bound_under_main_only(self.candidate_source()) else "")
            raise HarnessVerdict("generation_failure", f"the program, once executed, binds no `ModelNew`{where}")
        self.model_new = mod.ModelNew  # what the program bound to the name: a stateful problem's trials build it again
        try:
            model = self._construct(mod.ModelNew)
        except BaseException as exc:  # noqa: BLE001
            raise self._fail_exception(exc, "while constructing ModelNew") from None
        self._share_weights(model)
        self.trip("after loading the candidate")
        return model

    def trip(self, where: str) -> None:
        found = (self.writes.finding() if self.writes is not None else None) or self.tripwire.check()
        if found:
            raise HarnessVerdict("cheat_detected", f"{found[1]} ({where})", rule=found[0])

    def _share_weights(self, model, source=None) -> None:
        """Same names, shapes and dtypes as the reference (``source``, else ``ref_model``): give it the reference's
        exact weights."""
        try:
            ref_sd, sd = (self.ref_model if source is None else source).state_dict(), model.state_dict()
        except Exception:  # noqa: BLE001 - not an nn.Module: nothing to share
            return
        if ref_sd.keys() == sd.keys() and all(ref_sd[k].shape == sd[k].shape and ref_sd[k].dtype == sd[k].dtype
                                              for k in ref_sd):
            model.load_state_dict(ref_sd)

    @contextlib.contextmanager
    def _poisoned_allocations(self):
        """NaN-fill every uninitialised allocation (torch.empty & co, in Python or C++) while checking."""
        torch = self.torch
        prev = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
        _deterministic(torch, True, warn_only=True)
        fill = getattr(torch.utils, "deterministic", None)
        prev_fill = fill.fill_uninitialized_memory if fill else None
        if fill:
            fill.fill_uninitialized_memory = True
        try:
            yield
        finally:
            _deterministic(torch, prev[0], warn_only=prev[1])
            if fill:
                fill.fill_uninitialized_memory = prev_fill

    def _call(self, model, inputs, where: str):
        try:
            with candidate_code():
                out = model(*inputs)
                self.clock.sync()
            return out
        except BaseException as exc:  # noqa: BLE001
            raise self._fail_exception(exc, where) from None


def _deterministic(torch, mode: bool, warn_only: bool) -> None:
    """``torch.use_deterministic_algorithms`` without its import of inductor's config (seconds, in a light
    worker's first correctness trial), which only sets inductor's flag for code compiled later; nothing is
    compiled while allocations are poisoned."""
    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
    else:
        setter(mode, warn_only=warn_only)


def cpu_name() -> str:
    import os
    import platform
    return f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[0][:300] if lines else type(exc).__name__
