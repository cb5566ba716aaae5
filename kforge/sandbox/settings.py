"""Process-wide torch settings in a worker: which numerics each program runs with, and keeping a
candidate's harmless settings out of the reference's timing.

Three states matter:

* **strict** numerics (TF32 off everywhere): the correctness reference and the candidate. A candidate
  judged at fp32's 1e-4 tolerance must compute in true fp32, so it runs under these too. At
  ``verify.precision=tf32`` the candidate's state has TF32 on (that is the precision asked for), and the
  correctness reference still runs with it off (``exact``).
* **default** numerics (whatever PyTorch starts with: cuDNN's TF32 on, cuBLAS's off): the eager and
  ``torch.compile`` references when they are *timed*. That is how people run PyTorch and how
  KernelBench's published baselines were taken; a speedup is only meaningful against it.
* **neutral** settings a candidate may change because they leave the numerics alone (``cudnn.benchmark``,
  ``cudnn.deterministic``, the intra-op thread count, the SDPA backends): allowed, but swapped out
  around every reference call, so a candidate's autotuning never speeds up (or slows) its baseline.

Numerics flags a candidate loosens (TF32, reduced-precision reductions) are still caught by the
tripwire; tightening them is harmless and allowed.

Two more of a candidate's settings are kept from its baselines: deterministic algorithms (slower kernels for
some operators) are switched off around every timed baseline, and torch's configuration modules
(``torch._inductor.config``, ``torch._dynamo.config``: a candidate tunes its own ``torch.compile`` there) are
invisible to the compile reference, which is compiled and called in the harness's own context
(`Settings.isolated`): those modules keep every value in a ``contextvars.ContextVar``, so a context copied before
any candidate code ran holds the harness's configuration, whatever the candidate sets afterwards.
"""

from __future__ import annotations

import contextvars
from typing import Any, Callable

#: Flags that change the numerics of matrix products and convolutions: (module path, attribute).
NUMERICS = (("torch.backends.cuda.matmul", "allow_tf32"), ("torch.backends.cudnn", "allow_tf32"),
            ("torch.backends.cuda.matmul", "allow_fp16_reduced_precision_reduction"),
            ("torch.backends.cuda.matmul", "allow_bf16_reduced_precision_reduction"))
#: Attributes a candidate may assign: they change speed, not results.
NEUTRAL = (("torch.backends.cudnn", "benchmark"), ("torch.backends.cudnn", "deterministic"),
           ("torch.backends.cudnn", "enabled"), ("torch.backends.cudnn", "benchmark_limit"),
           ("torch.backends.mkldnn", "enabled"))
#: SDPA backend switches: (getter, setter) on torch.backends.cuda.
SDPA = (("flash_sdp_enabled", "enable_flash_sdp"), ("mem_efficient_sdp_enabled", "enable_mem_efficient_sdp"),
        ("math_sdp_enabled", "enable_math_sdp"), ("cudnn_sdp_enabled", "enable_cudnn_sdp"))
#: Dotted names the static ``monkey_patch`` rule lets a candidate assign (numerics ones are judged at run time).
ASSIGNABLE = frozenset(f"{m}.{a}" for m, a in NUMERICS + NEUTRAL)
#: The TF32 switches among `NUMERICS`.
TF32 = (("torch.backends.cuda.matmul", "allow_tf32"), ("torch.backends.cudnn", "allow_tf32"))


def _owner(torch, path: str):
    obj = torch
    for part in path.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


class Settings:
    """Reads and applies the settings above; made in the worker before any candidate code runs."""

    def __init__(self, torch):
        self.torch = torch
        self.defaults = self.read()
        """As PyTorch started (the zygote never changes them): the numerics references are timed with."""
        self.strict: dict[str, Any] = {}
        """The harness's own state once `use_strict` ran: strict numerics, default neutral settings."""
        self._context = contextvars.copy_context()
        """The harness's context, copied before any candidate code runs: its library configuration."""

    def isolated(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` called in the harness's own context: torch's configuration modules read their values there, so
        what a candidate assigned in them (for its own compiled code) does not reach the compile reference.
        Values a module that was first imported later holds are its defaults, as the harness never sets any."""
        context = self._context

        def call(*args: Any, **kwargs: Any) -> Any:
            return context.run(fn, *args, **kwargs)
        return call

    def read(self) -> dict[str, Any]:
        torch, out = self.torch, {}
        for path, attr in NUMERICS + NEUTRAL:
            try:
                out[f"{path}.{attr}"] = getattr(_owner(torch, path), attr)
            except AttributeError:
                continue
        cuda = torch.backends.cuda
        for getter, _ in SDPA:
            if hasattr(cuda, getter):
                out[f"sdpa.{getter}"] = bool(getattr(cuda, getter)())
        out["threads"] = torch.get_num_threads()
        return out

    def apply(self, state: dict[str, Any]) -> None:
        torch = self.torch
        setters = dict(SDPA)
        for key, value in state.items():
            if key == "threads":
                if torch.get_num_threads() != value:
                    torch.set_num_threads(value)
            elif key.startswith("sdpa."):
                getter = key.split(".", 1)[1]
                if bool(getattr(torch.backends.cuda, getter)()) != value:
                    getattr(torch.backends.cuda, setters[getter])(value)
            else:
                path, attr = key.rsplit(".", 1)
                owner = _owner(torch, path)
                if getattr(owner, attr) != value:
                    setattr(owner, attr, value)

    def use_strict(self, threads: int | None = None, tf32: bool = False) -> None:
        """The harness's state: TF32 (unless ``tf32``: the precision asked for) and reduced-precision reductions
        off, everything else as PyTorch starts."""
        state = dict(self.defaults)
        for path, attr in NUMERICS:
            key = f"{path}.{attr}"
            if key in state:
                state[key] = tf32 and (path, attr) in TF32
        if threads:
            state["threads"] = threads
        self.apply(state)
        self.strict = self.read()

    def loosened(self) -> tuple[str, Any] | None:
        """A numerics flag the live state has turned on although the strict state has it off."""
        live = self.read()
        for path, attr in NUMERICS:
            key = f"{path}.{attr}"
            if live.get(key) and not self.strict.get(key, True):
                return key, self.strict.get(key)
        return None


class Swap:
    """Runs reference code under the harness's settings and gives the candidate its own back afterwards."""

    MODES = ("strict", "exact", "default", "tf32", "kernelbench")

    def __init__(self, settings: Settings, numerics: str, timed: bool = False):
        if numerics not in self.MODES:
            raise ValueError(f"numerics {numerics!r} is not one of {self.MODES}")
        self.settings = settings
        self.timed = timed
        """A timed baseline: it runs as PyTorch runs by default, without a candidate's deterministic mode (which
        would slow it down). A correctness reference keeps the trial's mode, as the candidate's call has it: cuDNN
        picks other algorithms under it, whose TF32 results differ by 1e-3 (seen on an H100)."""
        self.numerics = numerics
        """``strict``: the harness's own state (`Settings.use_strict`); ``exact``: that with TF32 off, the
        correctness reference; ``default``: PyTorch's numerics, the timed baselines; ``tf32``: TF32 on, the
        baselines at ``verify.precision=tf32``; ``kernelbench``: the candidate's own state with PyTorch's default
        numerics wherever it left the harness's (KernelBench runs the candidate, as the reference, with PyTorch's
        defaults: cuDNN's TF32 on)."""
        self._saved: dict[str, Any] | None = None

    def __enter__(self) -> "Swap":
        s = self.settings
        self._saved = s.read()
        self._deterministic = None
        if self.numerics == "kernelbench":
            state = dict(self._saved)
            for path, attr in NUMERICS:
                key = f"{path}.{attr}"
                if key in state and key in s.defaults and state[key] == s.strict.get(key):
                    state[key] = s.defaults[key]
            s.apply(state)
            return self
        state = dict(s.strict)
        for path, attr in NUMERICS:
            key = f"{path}.{attr}"
            if key not in state:
                continue
            if self.numerics == "default" and key in s.defaults:
                state[key] = s.defaults[key]
            elif self.numerics in ("exact", "tf32"):
                state[key] = self.numerics == "tf32" and (path, attr) in TF32
        if self.timed and self.numerics in ("default", "tf32"):
            # A timed baseline runs as PyTorch runs by default: a candidate's deterministic mode would slow it down.
            torch = s.torch
            if torch.are_deterministic_algorithms_enabled():
                self._deterministic = torch.is_deterministic_algorithms_warn_only_enabled()
                _set_deterministic(torch, False, False)
        s.apply(state)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.settings.apply(self._saved or {})
        if self._deterministic is not None:
            _set_deterministic(self.settings.torch, True, self._deterministic)


def _set_deterministic(torch, mode: bool, warn_only: bool) -> None:
    """``torch.use_deterministic_algorithms`` without its import of inductor's config (see the harness's
    ``_deterministic``): only code compiled later reads inductor's flag."""
    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
    else:
        setter(mode, warn_only=warn_only)
