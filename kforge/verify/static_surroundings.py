"""Static rules on what a candidate may touch around its kernel: the grader's process and the machine.

Registered after `kforge.verify.static_rules` (``introspection``, ``environment``). Both deny what a cheat
needs (the grader's frames and objects, the harness's modules, the environment a grader is recognised by,
the files around the candidate) and let through what models write while building honest kernels, seen in
published KernelBench kernels: ``gc.collect()``, ``'x' in locals()``, ``ctypes.byref`` for a CUDA runtime
call, ``os.environ['TORCH_CUDA_ARCH_LIST'] = ...`` and the neutral runtime settings (``CUDA_MODULE_LOADING``),
a build directory under ``~``, kernel sources written to a file and built with ``cpp_extension.load``. Where
such a write may land is decided at run time, by the worker's write guard (`kforge.sandbox.writeguard`), since
no reading of the source can tell.
"""

from __future__ import annotations

import ast
import re

from ..backends import Backend
from ..problems import Problem
from ..sandbox.env import is_secret
from .findings import Finding, rule
from .static_ast import aliases_of, dotted, imports, line_of, literal, strings
from .static_rules import SETTINGS_ENV

INTROSPECTION_MODULES = {"gc", "inspect", "ctypes", "importlib", "dis", "traceback", "tracemalloc", "weakref",
                         "marshal", "pickle", "dill", "cffi", "_ctypes"}
INTROSPECTION_CALLS = {"globals", "vars", "eval", "exec", "compile", "__import__", "breakpoint"}
# Ways to tell whether the verifier is measuring the forward right now (profiler, dispatch-mode tracing).
MEASUREMENT_PROBES = {"_python_dispatch", "_get_dispatch_mode", "_get_current_dispatch_mode", "_profiler_enabled",
                      "is_in_torch_dispatch_mode", "_get_current_dispatch_mode_stack", "_is_profiler_enabled",
                      "_dispatch_tls_local_include_set", "_len_torch_dispatch_stack"}
INTROSPECTION_ATTRS = {"_getframe", "f_back", "f_globals", "f_locals", "__subclasses__", "__code__", "__globals__",
                       "__closure__", "modules", "settrace", "setprofile", "__builtins__", "gi_frame", "tb_frame"}
# Introspection modules whose harmless parts models use: the garbage collector's switches (never its object
# lists), and ctypes' value types for passing an address to a CUDA runtime call (never raw memory access).
HARMLESS = {
    "gc": {"collect", "disable", "enable", "isenabled", "freeze", "unfreeze", "get_count", "get_threshold",
           "set_threshold", "get_freeze_count"},
    "ctypes": {"byref", "sizeof", "c_void_p", "c_bool", "c_float", "c_double", "c_size_t", "c_ssize_t", "c_int",
               "c_uint", "c_long", "c_ulong", "c_longlong", "c_ulonglong", "c_short", "c_ushort", "c_int8", "c_int16",
               "c_int32", "c_int64", "c_uint8", "c_uint16", "c_uint32", "c_uint64"},
}
# What turns a ctypes value type into raw memory access.
RAW_MEMORY = {"from_address", "from_buffer", "from_buffer_copy", "in_dll"}
# Looking at the machine around the candidate: directory listings and what files say.
SURROUNDINGS = {"os.listdir", "os.walk", "os.scandir", "os.environb", "glob.glob", "glob.iglob"}
ENVIRONMENT = {"os.environ", "os.getenv", "os.putenv", "os.unsetenv"}
# Variables that tell a grader's process apart (kforge's own, a test runner's, a CI's, those kforge's GPU workers
# set): reading one is how a program would behave differently when graded. Reading any other variable by name
# (TORCH_EXTENSIONS_VERBOSE for load_inline's verbosity, DEBUG, a kernel's own tuning knob) changes what the
# program does for everyone alike, so it is allowed; credentials are denied too (they are not there to read).
GRADER_ENV = re.compile(r"KFORGE|PYTEST|KERNELBENCH|GRADER|^CI$|^GITHUB_|^BUILDKITE|^JENKINS|^GITLAB_CI|"
                        r"^PYTORCH_NVML_BASED_CUDA_CHECK$", re.I)
CPP_ENV = re.compile(r"\bgetenv\s*\(|\benviron\b")
# Raw descriptor writes and abrupt exits: the worker's reply pipe is a descriptor of the candidate's process.
OS_DESCRIPTORS = {"write", "writev", "pwrite", "pwritev", "fdopen", "dup", "dup2", "_exit", "sendfile"}
CPP_DESCRIPTORS = re.compile(r"(?<![\w.>])(?:::)?\b(?:write|writev|pwrite|_exit|_Exit|dup2?|fdopen)\s*\(")
CPP_ESCAPE = re.compile(r"\bdlopen\s*\(|\bdlsym\s*\(|\bsystem\s*\(|\bpopen\s*\(|\bfork\s*\(|\bexecv")


def _parents(tree: ast.Module) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _in_function(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return True
    return False


def _harmless_use(module: str, tree: ast.Module, aliases: dict[str, str], parents: dict[ast.AST, ast.AST]) -> bool:
    """Every use of ``module`` (imported whole or by name) is one of its harmless parts."""
    allowed = HARMLESS[module]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == module \
                and any(a.name not in allowed for a in node.names):
            return False
        if not isinstance(node, ast.Name) or node.id not in aliases:
            continue
        target = aliases[node.id]
        if target == module:  # `gc` itself: only `gc.collect` and the like
            parent = parents.get(node)
            if not (isinstance(parent, ast.Attribute) and parent.value is node and parent.attr in allowed):
                return False
            node = parent
        elif not target.startswith(module + "."):
            continue
        parent = parents.get(node)  # `ctypes.c_void_p.from_address(...)`: raw memory
        if isinstance(parent, ast.Attribute) and parent.attr in RAW_MEMORY:
            return False
    return True


def _plain_assignment(call: ast.Call, parents: dict[ast.AST, ast.AST]) -> bool:
    """``globals()["ModelNew"] = Impl`` at module level: a plain assignment to a name of the candidate's own (one
    way models bind ``ModelNew``); a computed or dunder key, a read, or a call inside a function stays denied."""
    target = parents.get(call)
    return (call.func.id == "globals" and not call.args and isinstance(target, ast.Subscript)
            and target.value is call and isinstance(target.ctx, ast.Store)
            and isinstance(key := literal(target.slice), str) and key.isidentifier() and not key.startswith("__")
            and not _in_function(call, parents))


@rule("introspection")
def _introspection(tree: ast.Module, source: str, backend: Backend, problem: Problem | None) -> list[Finding]:
    aliases, parents = aliases_of(tree), _parents(tree)
    harmless = {m for m in HARMLESS if _harmless_use(m, tree, aliases, parents)}
    out = [Finding("introspection", f"imports {n}: reading the grader's state is not allowed", line_of(node))
           for node, n in imports(tree)
           if (n.split(".")[0] in INTROSPECTION_MODULES and n not in harmless) or n.startswith("kforge")]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in INTROSPECTION_CALLS and not _plain_assignment(node, parents):
                out.append(Finding("introspection", f"calls {node.func.id}()", line_of(node)))
            elif node.func.id == "locals" and not _in_function(node, parents):  # a module's locals are its globals
                out.append(Finding("introspection", "calls locals() outside a function", line_of(node)))
        elif isinstance(node, ast.Attribute) and node.attr in INTROSPECTION_ATTRS:
            d = dotted(node, aliases) or node.attr
            if node.attr != "modules" or d == "sys.modules":
                out.append(Finding("introspection", f"uses {d}", line_of(node)))
        elif isinstance(node, ast.Name) and node.id == "__builtins__":
            out.append(Finding("introspection", "uses __builtins__", line_of(node)))
        if isinstance(node, ast.Attribute) and node.attr in MEASUREMENT_PROBES \
                and (dotted(node, aliases) or "").startswith("torch"):
            out.append(Finding("introspection", f"uses {dotted(node, aliases)}: whether the forward is being "
                               "measured is not the candidate's business", line_of(node)))
    for node, n in imports(tree):
        if any(p in n.split(".") for p in MEASUREMENT_PROBES) and n.startswith("torch"):
            out.append(Finding("introspection", f"imports {n}: whether the forward is being measured is not the "
                               "candidate's business", line_of(node)))
    for text in strings(tree):
        m = CPP_ESCAPE.search(text)
        if m:
            out.append(Finding("introspection", f"the kernel source calls {m.group(0).rstrip('(')}"))
    return out


def _env_keys(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> tuple[list | None, bool]:
    """The variable names one use of ``os.environ``/``os.getenv`` touches (None unless they are literals), and
    whether it only reads them."""
    parent = parents.get(node)
    if isinstance(parent, ast.Subscript) and parent.value is node:  # os.environ["X"], read or written
        return [literal(parent.slice)], isinstance(parent.ctx, ast.Load)
    if isinstance(parent, ast.Call) and parent.func is node:  # os.getenv("X"), os.putenv("X", v)
        name = (dotted(node, {}) or "").rsplit(".", 1)[-1]
        return ([literal(parent.args[0])] if parent.args else None), name in ("getenv", "os.getenv")
    if isinstance(parent, ast.Attribute) and isinstance(call := parents.get(parent), ast.Call) and call.func is parent:
        if parent.attr == "update":  # os.environ.update({"X": v}) or update(X=v)
            keys = [k.arg for k in call.keywords]
            for arg in call.args:
                if not isinstance(arg, ast.Dict):
                    return None, False
                keys += [literal(k) for k in arg.keys]
            return keys, False
        # .get("X") reads; .setdefault("X", v) and .pop("X") write
        return ([literal(call.args[0])] if call.args else None), parent.attr == "get"
    if isinstance(parent, ast.Compare) and node in parent.comparators:  # "X" in os.environ
        return [literal(parent.left)], True
    return None, False


def _env_denied(d: str, keys: list | None, reads: bool) -> str | None:
    """Why a use of the environment is denied (None: it is fine). Writes are held to the build and neutral
    runtime settings (they can reach the reference's process-wide state); reads to any literal name that is no
    grader's signature and no credential (`GRADER_ENV`). A computed name, or the whole environment, is denied."""
    if keys is None or any(not isinstance(k, str) for k in keys):
        return (f"uses {d} by a computed name, or all of it: a candidate must not look at its surroundings (reading "
                "a build or logging setting by its name is allowed)")
    if reads:
        bad = [k for k in keys if GRADER_ENV.search(k) or is_secret(k)]
        return (f"reads {d} ({', '.join(bad)}): a variable that tells the grader apart, or a credential (reading a "
                "build or logging setting by its name is allowed)") if bad else None
    bad = [k for k in keys if k not in SETTINGS_ENV]
    return (f"writes {d} ({', '.join(bad)}): only build settings and neutral runtime ones may be set "
            "(TORCH_CUDA_ARCH_LIST, MAX_JOBS, CUDA_MODULE_LOADING, ...)") if bad else None


def _open_mode(call: ast.Call) -> str | None:
    mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
    return "r" if mode is None else literal(mode)


def _writes_only(mode: str | None) -> bool:
    """A mode that writes a file and cannot read it back (a kernel source for the build, say)."""
    return isinstance(mode, str) and any(c in mode for c in "wax") and "+" not in mode and "r" not in mode


@rule("environment")
def _environment(tree: ast.Module, source: str, backend: Backend, problem: Problem | None) -> list[Finding]:
    aliases, parents = aliases_of(tree), _parents(tree)
    out = []
    for node in ast.walk(tree):
        d = dotted(node, aliases) if isinstance(node, (ast.Attribute, ast.Name)) else None
        if d in ENVIRONMENT:
            if why := _env_denied(d, *_env_keys(node, parents)):
                out.append(Finding("environment", why, line_of(node)))
        elif d in SURROUNDINGS:
            out.append(Finding("environment", f"reads {d}: a candidate must not look at its surroundings",
                               line_of(node)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open" \
                and not _writes_only(_open_mode(node)):
            out.append(Finding("environment", "opens files for reading (writing a kernel source to build is allowed)",
                               line_of(node)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("read_text", "read_bytes"):
            out.append(Finding("environment", f"reads files ({node.func.attr})", line_of(node)))
        if isinstance(node, ast.Call) and (c := dotted(node.func, aliases) or "").startswith("os.") \
                and c.split(".")[1] in OS_DESCRIPTORS:
            out.append(Finding("environment", f"calls {c}: only the harness writes to the process's descriptors "
                               "or ends it", line_of(node)))
    for text in strings(tree):
        if CPP_ENV.search(text):
            out.append(Finding("environment", "the kernel source reads the environment (getenv)"))
        if m := CPP_DESCRIPTORS.search(text):
            out.append(Finding("environment", f"the kernel source calls {m.group(0).rstrip('( ')}: only the harness "
                               "writes to the process's descriptors or ends it"))
    return out
