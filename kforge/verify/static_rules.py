"""The static rules (registered into `kforge.verify.findings.RULES` on import, in this order).

Each rule reads the candidate's Python AST and, for C++/CUDA, the string constants that hold kernel
sources. They target the reward hacks of docs/verification.md ("Defences against reward hacking"): torch fallbacks, try/except fallbacks,
monkey-patching, threads/processes/side streams, tensor subclasses, and kernels that exist but are
never called. What a candidate may touch around it (the grader's process, the machine) is judged in
`kforge.verify.static_surroundings`.
"""

from __future__ import annotations

import ast
import re

from ..backends import Backend
from ..problems import Problem
from ..sandbox.settings import ASSIGNABLE
from .findings import Finding, rule
from .static_ast import aliases_of as _aliases
from .static_ast import dotted as _dotted
from .static_ast import functions as _functions
from .static_ast import imports as _imports
from .static_ast import line_of as _line
from .static_ast import literal
from .static_ast import strings as _strings
from .static_model import model_classes, model_methods

# Modules whose attributes a candidate must never assign (timers, the harness, torch itself).
PROTECTED = {"torch", "time", "kforge", "triton", "numpy", "builtins", "sys", "os", "gc", "math", "importlib",
             "functools", "random", "threading", "inspect", "ctypes", "torch.nn", "torch.nn.functional",
             "torch.cuda", "torch.utils", "torch.utils.cpp_extension", "triton.language", "torch.backends",
             "pyopencl", "pyopencl._cl", "cutlass", "cutlass.cute", "tilelang", "tilelang.language"}
THREADS = {"threading", "_thread", "multiprocessing", "concurrent", "concurrent.futures", "subprocess", "asyncio",
           "signal", "torch.multiprocessing", "pty", "sched"}
OS_PROCESS = {"fork", "system", "popen", "spawnl", "spawnv", "execv", "execve", "kill", "posix_spawn", "forkpty"}
CPP_THREADS = re.compile(r"std::thread|std::async|pthread_create|cudaLaunchHostFunc|"
                         r"cudaStreamAddCallback|#include\s*<thread>|#include\s*<future>")
# Streams of the candidate's own. Models use them honestly and wait for them; work on one that nobody waits
# for escapes the timed stream. A candidate that has any is timed with the device settled (see own_streams).
PY_STREAMS = ("torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.set_stream", "torch.cuda.ExternalStream",
              "torch.cuda.StreamContext", "torch.Stream", "torch.cuda.streams.Stream")
CPP_STREAMS = re.compile(r"getStreamFromPool|cudaStreamCreate\w*|setCurrentCUDAStream|getStreamFromExternal|"
                         r"CUDAStreamGuard")
# Joining a stream back: the calling stream (or the host) waits for its work.
STREAM_JOINS = re.compile(r"\.wait_stream\s*\(|\.wait_event\s*\(|\bsynchronize\s*\(|cudaStreamSynchronize|"
                          r"cudaStreamWaitEvent|cudaDeviceSynchronize|cudaEventSynchronize")
# Streams that are the caller's own: `torch.cuda.stream(torch.cuda.current_stream())` changes nothing.
CALLER_STREAMS = ("torch.cuda.current_stream", "torch.cuda.default_stream")
# Environment variables a build reads: models set the CUDA arch list or the job count before building, which
# changes how the extension is compiled, never what the harness does.
BUILD_ENV = frozenset({"TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "CXX", "CC", "CUDA_HOME", "CUDA_PATH",
                       "TORCH_EXTENSIONS_DIR", "TORCH_NVCC_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS",
                       "TORCH_DONT_CHECK_COMPILER_ABI"})
# Runtime settings that change no result and no reference's time, each with why; a candidate may set them as it
# sets build settings (models set CUDA_MODULE_LOADING=LAZY before loading their extension, say).
RUNTIME_ENV = {
    "CUDA_MODULE_LOADING": "when the driver loads a module's kernels (at first launch or all at once): start-up "
                           "cost only, and every program is warmed up before it is timed",
    "OMP_NUM_THREADS": "OpenMP's thread count, read once when the runtime loads (before any candidate); the harness "
                       "sets the intra-op count itself and swaps it back around every reference call",
    "MKL_NUM_THREADS": "MKL's thread count: as OMP_NUM_THREADS",
    "PYOPENCL_CTX": "which OpenCL platform and device create_some_context() picks: the candidate's own kernels' "
                    "device, never the reference's",
    "PYOPENCL_COMPILER_OUTPUT": "whether pyopencl prints the OpenCL compiler's warnings",
}
# Not neutral, so still denied: CUDA_LAUNCH_BLOCKING (every launch of the process synchronous, the reference's
# too: its time changes), CUBLAS_WORKSPACE_CONFIG (the workspace of the cuBLAS handles the reference's matrix
# products share, which picks their algorithms), PYTORCH_CUDA_ALLOC_CONF and PYTORCH_NO_CUDA_MEMORY_CACHING (the
# caching allocator the reference allocates from too).
SETTINGS_ENV = BUILD_ENV | frozenset(RUNTIME_ENV)
"""Variables a candidate may read and set: how its extension is built, and the neutral runtime settings."""


#: pyopencl's constructors of what runs the candidate's OpenCL C: a name bound to one (or to a kernel taken from
#: one: ``cl.Program(ctx, src).build().relu``) is a kernel.
OPENCL_BUILDERS = ("pyopencl.Program", "pyopencl.Kernel", "ElementwiseKernel", "ReductionKernel", "GenericScanKernel",
                   "InclusiveScanKernel", "ExclusiveScanKernel")


def _builds_opencl(value: ast.AST, aliases: dict[str, str]) -> bool:
    """Whether an expression makes a pyopencl program or kernel (or takes something of one being made)."""
    return any(isinstance(n, ast.Call) and (_dotted(n.func, aliases) or "").endswith(OPENCL_BUILDERS)
               for n in ast.walk(value))


def _bound(targets: list[ast.expr]) -> set[str]:
    """The names an assignment binds: ``a``, ``self.a``, each of ``a, b = ...``."""
    out = set()
    for t in targets:
        if isinstance(t, ast.Name):
            out.add(t.id)
        elif isinstance(t, ast.Attribute):
            out.add(t.attr)
        elif isinstance(t, (ast.Tuple, ast.List)):
            out |= _bound(list(t.elts))
    return out


def _kernel_names(tree: ast.Module, aliases: dict[str, str]) -> set[str]:
    """Names bound to kernels: results of load_inline/load, @triton.jit functions, pyopencl programs and kernels."""
    kernels = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _builds_opencl(node.value, aliases):
            kernels |= _bound(node.targets)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            if (_dotted(node.value.func, aliases) or "").endswith(("load_inline", "cpp_extension.load")):
                kernels |= {t.id for t in node.targets if isinstance(t, ast.Name)}
                kernels |= {t.attr for t in node.targets if isinstance(t, ast.Attribute)}
        if isinstance(node, ast.FunctionDef) and any(
                (_dotted(d.func if isinstance(d, ast.Call) else d, aliases) or "").startswith("triton")
                for d in node.decorator_list):
            kernels.add(node.name)
    # A kernel taken from a program bound earlier (``self.knl = self.prg.relu``) is a kernel too.
    assigns = [n for n in ast.walk(tree) if isinstance(n, ast.Assign)]
    for _ in range(3):
        more = {name for n in assigns if any(isinstance(m, ast.Name) and m.id in kernels or
                                             isinstance(m, ast.Attribute) and m.attr in kernels
                                             for m in ast.walk(n.value)) for name in _bound(n.targets)}
        if more <= kernels:
            break
        kernels |= more
    return kernels


# Library configuration modules: what a program assigns there configures the library for its own code (its own
# torch.compile: `torch._inductor.config.coordinate_descent_tuning = True`); the compile reference is compiled and
# run with the harness's configuration (`kforge.sandbox.settings.Settings.isolated`), so it cannot reach a baseline.
CONFIG_MODULES = ("torch._inductor.config", "torch._dynamo.config", "torch._functorch.config", "torch.compiler.config",
                  "torch.fx.experimental._config", "torch._export.config")


def library_config(owner: str | None) -> bool:
    """Whether ``owner`` (a dotted name) is a library configuration module or a section of one."""
    return bool(owner) and any(owner == m or owner.startswith(m + ".") for m in CONFIG_MODULES)


_NOT_TORCH = ("math", "numpy", "triton", "builtins", "cutlass", "tilelang")  # the kernel DSLs' math is the kernel's


@rule("no_kernel")
def _no_kernel(tree: ast.Module, source: str, backend: Backend, problem: Problem | None) -> list[Finding]:
    if backend.has_kernel(source):
        return []
    return [Finding("no_kernel", f"no kernel found: the {backend.name} backend needs {backend.kernel_hint}; "
                                 "a program that only calls PyTorch has not written a kernel")]


@rule("forbidden_op")
def _forbidden_op(tree: ast.Module, source: str, backend: Backend, problem: Problem | None) -> list[Finding]:
    """Calling the operators the kernel should replace (outside __init__, or in the C++ source)."""
    ops = set(problem.ops) if problem else set()
    if not ops:
        return []
    aliases = _aliases(tree)
    kernels = _kernel_names(tree, aliases)
    found: list[Finding] = []
    # Submodules built in __init__ from torch classes that do the problem's work (self.norm = nn.LayerNorm(d)).
    op_modules = {}
    for fn in _functions(tree):
        if fn.name == "__init__":
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                    name = _dotted(node.value.func, aliases) or ""
                    if name.startswith("torch") and name.rsplit(".", 1)[-1] in ops:
                        for t in node.targets:
                            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                                op_modules[t.attr] = name
    for fn in _functions(tree):
        if fn.name == "__init__":
            continue
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            f = node.func
            base = _dotted(f.value, aliases)
            if isinstance(f.value, ast.Name) and f.value.id == "self" and f.attr in op_modules:
                found.append(Finding("forbidden_op", f"forward calls self.{f.attr}, a {op_modules[f.attr]}: the "
                                     "reference's own operator, not a kernel", _line(node)))
            elif f.attr in ops:
                parts = (base or "").split(".")
                root = parts[1] if parts[0] == "self" and len(parts) > 1 else parts[0]  # self.prg: its own program
                if root in kernels or (base or "").startswith(_NOT_TORCH) or root in _NOT_TORCH:
                    continue  # the candidate's own kernel module, or math/numpy/triton functions
                found.append(Finding("forbidden_op", f"calls `{f.attr}` ({base + '.' + f.attr if base else 'a method'}),"
                                     " an operator this problem's kernel should replace", _line(node)))
    cpp_call = re.compile(r"(?:\b(?:torch|at)::(?:native::)?|\.)(" + "|".join(map(re.escape, sorted(ops)))
                          + r")\s*\(")
    for text in _strings(tree):
        if not re.search(r"torch::|at::|#include|__global__", text):
            continue
        for m in cpp_call.finditer(text):
            found.append(Finding("forbidden_op", f"the C++ source calls `{m.group(0).rstrip('(')}`, an operator "
                                 "this problem's kernel should replace"))
    return found


@rule("try_fallback")
def _try_fallback(tree: ast.Module, source: str, backend: Backend, problem: Problem | None) -> list[Finding]:
    """try/except inside functions: the classic 'kernel, else the reference' fallback."""
    out = []
    for fn in _functions(tree):
        for node in ast.walk(fn):
            if isinstance(node, ast.Try) and any(
                    any(isinstance(x, ast.Call) for x in ast.walk(h)) or not all(isinstance(s, ast.Raise)
                                                                             for s in h.body)
                    for h in node.handlers):
                out.append(Finding("try_fallback", f"try/except in {fn.name}() whose handler does work: a fallback "
                                   "path the verifier would time instead of the kernel", _line(node)))
    return out


@rule("monkey_patch")
def _monkey_patch(tree: ast.Module, source: str, backend: Backend, problem: Problem | None) -> list[Finding]:
    aliases = _aliases(tree)
    out = []

    def protected(dotted: str | None) -> bool:
        return bool(dotted) and any(dotted == p or dotted.startswith(p + ".") for p in PROTECTED)

    for node in ast.walk(tree):
        targets = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for t in targets:
            if isinstance(t, ast.Attribute) and _dotted(t, aliases) in ASSIGNABLE:
                continue  # speed settings are allowed; numerics flags are judged at run time (tripwire)
            if isinstance(t, ast.Attribute) and library_config(_dotted(t.value, aliases)):
                continue  # the library's configuration, for the candidate's own compiled code (CONFIG_MODULES)
            if isinstance(t, ast.Attribute) and protected(_dotted(t.value, aliases)):
                if _backend_flag(t, node, aliases):  # e.g. cudnn.fastest = True: a flag torch does not read
                    out.append(Finding("monkey_patch", f"sets {_dotted(t, aliases)} to a constant: a library setting "
                                       "(or one no PyTorch release reads); the references run with the harness's "
                                       "own settings, and numerics flags are checked at run time", _line(node),
                                       severity="warn"))
                    continue
                out.append(Finding("monkey_patch", f"assigns {_dotted(t, aliases)}: patching torch, timers or the "
                                   "harness is not allowed", _line(node)))
            if isinstance(t, ast.Subscript) and _dotted(t.value, aliases) in ("sys.modules", "os.environ"):
                if _dotted(t.value, aliases) == "os.environ" and literal(t.slice) in SETTINGS_ENV:
                    continue  # a build or neutral runtime setting: the environment rule allows it too
                out.append(Finding("monkey_patch", f"writes {_dotted(t.value, aliases)}[...]", _line(node)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr") \
                and node.args and not (isinstance(node.args[0], ast.Name) and node.args[0].id == "self"):
            out.append(Finding("monkey_patch", f"{node.func.id}() on {ast.unparse(node.args[0])}", _line(node)))
    return out


def _backend_flag(target: ast.Attribute, node: ast.AST, aliases: dict[str, str]) -> bool:
    """A constant assigned to a ``torch.backends.*`` attribute: models set flags there that no PyTorch release
    reads (``cudnn.fastest``, ``cudnn.workspace_limit``: seen in published kernels). A value is data, not a
    patched function; whatever it does to the numerics, the run's tripwire sees."""
    return (isinstance(node, ast.Assign) and (_dotted(target.value, aliases) or "").startswith("torch.backends.")
            and all(isinstance(n, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop))
                    for n in ast.walk(node.value)))


def _streams(tree: ast.Module, aliases: dict[str, str]) -> list[tuple[str, int | None]]:
    """(what, line) for every stream the candidate makes or switches to, in Python or in its C++ sources."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (_dotted(node.func, aliases) or "") in PY_STREAMS:
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Call) and _dotted(arg.func, aliases) in CALLER_STREAMS:
                continue  # the caller's own stream
            out.append((_dotted(node.func, aliases), _line(node)))
    for text in _strings(tree):
        if m := CPP_STREAMS.search(text):
            out.append((f"the kernel source's {m.group(0)}", None))
    return out


def own_streams(source: str) -> bool:
    """Whether the candidate runs work on streams of its own: the run then times it with the device settled."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return bool(_streams(tree, _aliases(tree)))


@rule("threads_processes")
def _threads(tree: ast.Module, source: str, backend: Backend, problem: Problem | None) -> list[Finding]:
    aliases = _aliases(tree)
    out = [Finding("threads_processes", f"imports {n}: work in other threads or processes escapes the timed region",
                   _line(node)) for node, n in _imports(tree) if n in THREADS or n.split(".")[0] in THREADS]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            d = _dotted(node.func, aliases) or ""
            if d.startswith("os.") and d.split(".")[1] in OS_PROCESS:
                out.append(Finding("threads_processes", f"calls {d}", _line(node)))
    # A stream joined back is judged at run time (the output read on the calling stream, event time against
    # host time); whether *this* join is reached cannot be read from the source, so one join anywhere will do.
    joined = STREAM_JOINS.search(source) is not None
    for what, line in _streams(tree, aliases):
        if joined:
            out.append(Finding("threads_processes", f"uses {what} and joins it back: allowed; timed with the device "
                               "idle at the start event, and its output read on the calling stream", line, "warn"))
        else:
            out.append(Finding("threads_processes", f"uses {what} and never waits for it: work on a side stream is "
                               "not timed", line))
    for text in _strings(tree):
        m = CPP_THREADS.search(text)
        if m:
            out.append(Finding("threads_processes", f"the kernel source uses {m.group(0)}: work outside the timed "
                               "stream"))
    return out


@rule("tensor_subclass")
def _tensor_subclass(tree: ast.Module, source: str, backend: Backend, problem: Problem | None) -> list[Finding]:
    aliases = _aliases(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                if _dotted(base, aliases) in ("torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase"):
                    out.append(Finding("tensor_subclass", f"class {node.name} subclasses torch.Tensor: outputs must "
                                       "be plain, materialised tensors", _line(node)))
        if isinstance(node, ast.FunctionDef) and node.name in ("__torch_function__", "__torch_dispatch__"):
            out.append(Finding("tensor_subclass", f"defines {node.name}", _line(node)))
    return out


#: A kernel registered for an operator of torch's own (``aten``, ``prims``): the reference would call it too.
OPERATOR_OVERRIDE = re.compile(r"TORCH_LIBRARY_IMPL\s*\(\s*(?:aten|prims)\s*,|Library\(\s*[\"'](?:aten|prims)[\"']\s*,\s*"
                               r"[\"']IMPL|(?:impl|register_kernel|register_fake|register_autograd)\(\s*[\"'](?:aten|prims)::")


@rule("operator_override")
def _operator_override(tree: ast.Module, source: str, backend: Backend, problem: Problem | None) -> list[Finding]:
    m = OPERATOR_OVERRIDE.search(source)
    return [Finding("operator_override", f"registers a kernel for one of torch's own operators ({m.group(0).strip()}"
                    "...): the reference and the baselines would call it too; give the candidate's operators a "
                    "namespace of their own", source.count("\n", 0, m.start()) + 1)] if m else []


@rule("kernel_not_called")
def _kernel_not_called(tree: ast.Module, source: str, backend: Backend, problem: Problem | None) -> list[Finding]:
    """A kernel exists (the no_kernel rule is satisfied) but forward never reaches it."""
    if not backend.has_kernel(source):
        return []
    aliases = _aliases(tree)
    kernels = _kernel_names(tree, aliases)
    if not kernels:
        return []
    funcs: dict[str, list[ast.AST]] = {}
    for f in _functions(tree):
        funcs.setdefault(f.name, []).append(f)
    # a class named in a reachable function (``_Relu.apply(x)``, an autograd Function) has its methods reached too
    methods = {c.name: [m for m in c.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
               for c in ast.walk(tree) if isinstance(c, ast.ClassDef)}
    if not model_classes(tree):
        return []  # ModelNew names a class the source does not define (an import, type()): the run measures it
    # ModelNew's forward (or a __call__ of its own), however the program binds ModelNew
    todo, seen = model_methods(tree, "forward") + model_methods(tree, "__call__"), set()
    while todo:
        fn = todo.pop()
        if id(fn) in seen:  # by identity: the Function's forward has ModelNew's forward's name
            continue
        seen.add(id(fn))
        for node in ast.walk(fn):
            if isinstance(node, ast.Name) and node.id in kernels:
                return []
            if isinstance(node, ast.Attribute) and node.attr in kernels:
                return []
            if isinstance(node, ast.Name):
                todo += funcs.get(node.id, []) + methods.get(node.id, [])
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                todo += funcs.get(node.attr, [])
    return [Finding("kernel_not_called", "the kernel is built but forward never calls it", None)]


@rule("precision_downgrade")
def _precision(tree: ast.Module, source: str, backend: Backend, problem: Problem | None) -> list[Finding]:
    """fp32 problems computed in lower precision (warn: the tolerance is what rejects it)."""
    for line in source.splitlines():
        if (m := _DOWNGRADE.search(line)) and not _DTYPE_GENERIC.search(line):
            return [Finding("precision_downgrade", f"uses {m.group(0)}: fp32 problems must stay fp32", None, "warn")]
    return []


#: Lower-precision types and switches, as Python, Triton and C++ spell them.
_DOWNGRADE = re.compile(r"\.half\(\)|\.bfloat16\(\)|torch\.(?:float16|bfloat16|half)\b|allow_tf32\s*=\s*True|"
                        r"set_float32_matmul_precision|input_precision\s*=\s*['\"]tf32|__half\b|__nv_bfloat16|wmma::|"
                        r"(?:torch|at|c10)::k?(?:Half|BFloat16)\b|__float2(?:half|bfloat16)|\.to\(tl\.(?:float16|bfloat16)")
#: A line that names a half type to serve every dtype (a dispatch macro, a dtype test), not to compute in it.
_DTYPE_GENERIC = re.compile(r"AT_DISPATCH|scalar_type\(\)|\.dtype\s*[=!]=|[=!]=\s*(?:torch|at|c10)::k")
