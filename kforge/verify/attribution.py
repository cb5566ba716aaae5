"""Whose code did the work: the candidate's kernels, PyTorch's, or a vendor library's. Runs in the worker.

One correctness trial runs the reference and then the candidate under ``torch.profiler``. Each GPU
kernel is attributed by its symbol (Kineto names kernels by their demangled symbols):

* **candidate**: a symbol the candidate's own extension ``.so`` files define, one of its Triton JIT
  functions, or a kernel of no known library launched inside one of its calls;
* **library**: cuBLAS/cuBLASLt, cuDNN, CUTLASS, cuFFT, ... (``library`` is allowed for part of the work,
  as KernelBench allows it: a cuBLAS GEMM with the candidate's fused epilogue);
* **torch**: ATen's native kernels, code ``torch.compile`` generated, memcpy/memset;
* **unknown**: anything else (a kernel built through CuPy or Numba, say).

On a CPU the candidate's own time is the self time of its extension and Triton calls, against the
self time of every PyTorch operator in its forward (BLAS-backed ones count as ``library``), each the least
over the judged call and the calls made just before it (``AGAIN``): on a busy machine one preempted call
read a 36% share as 92%.

The same profile says which PyTorch operators the reference and the candidate ran, for `replayed`.
"""

from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import functools
import re
import struct
from collections import defaultdict

from .verdict import Attribution, KernelUse

REFERENCE, CANDIDATE = "kforge::reference", "kforge::candidate"
#: On a CPU, calls of the candidate's forward made just before the judged one (``CANDIDATE``), for their times alone
#: (`_least`): a CPU's times move with the machine's load, a GPU's kernels' do not.
AGAIN = "kforge::candidate_again"
_LIBRARY = re.compile(r"cutlass|cublas|cudnn|xmma|gemm|gemv|cusparse|cufft|_fft|fft_|curand|cusolver|magma|"
                      r"flash_fwd|flash_bwd|fmha|nchwToNhwc|nhwcToNchw|implicit_convolve|winograd|nvjet|"
                      r"splitKreduce|^sm\d+_|^ampere_|^volta_|^turing_|^hopper_|^maxwell_|cask|mkldnn|onednn|"
                      r"^aten::(?:mm|addmm|bmm|baddbmm|addbmm|mv|addmv|dot|vdot|_mkldnn\w*|mkldnn\w*|"
                      r"_scaled_dot_product_flash\w*|_efficient_attention\w*|_flash_attention\w*)$|^pyopencl::", re.I)
#: How CuTe DSL names the kernels it compiles from Python: kernel_cutlass_<function>_<argument types>.
_CUTE_DSL_KERNEL = re.compile(r"^kernel_cutlass_")
_TORCH = re.compile(r"\bat::|\bc10::|^triton_(?:poi|red|per|tem|for|unk)_|^Memcpy|^Memset|elementwise_kernel|"
                    r"reduce_kernel|\bcub::|\bthrust::|CatArrayBatchedCopy|indexSelect|cunn_|softmax_warp|"
                    r"at_cuda_detail|pytorch_flash|distribution_elementwise|fused_dropout|ncclKernel|^aten::|"
                    r"^prims::|^Torch-Compiled|^CompiledFunction", re.I)


# -- symbols of the candidate's extensions -------------------------------------------------------------
_SYMBOL = {"<": struct.Struct("<IBBHQQ"), ">": struct.Struct(">IBBHQQ")}  # Elf64_Sym


def _defined(path: str) -> list[tuple[bytes, list[int]]]:
    """Per symbol table of a 64-bit ELF shared object (.symtab, else .dynsym): its string table and the
    sorted offsets in it of the names of the functions the object defines."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return []
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return []
    end = "<" if data[5] == 1 else ">"
    (shoff,) = struct.unpack_from(end + "Q", data, 0x28)
    shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
    sections = [struct.unpack_from(end + "IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    sym = _SYMBOL[end]
    for wanted in (2, 11):  # SHT_SYMTAB, SHT_DYNSYM
        tables = []
        for _, typ, _, _, off, size, link, _, _, entsize in sections:
            if typ != wanted or entsize != sym.size:
                continue
            strtab = sections[link]
            rows = sym.iter_unpack(memoryview(data)[off:off + size - size % sym.size])
            starts = sorted({name for name, info, _, shndx, _, _ in rows if info & 0xF == 2 and shndx != 0})
            if starts:  # a defined function (STT_FUNC, not SHN_UNDEF)
                tables.append((data[strtab[4]:strtab[4] + strtab[5]], starts))
        if tables:
            return tables
    return []


def _name(table: bytes, start: int) -> str:
    return table[start:table.index(b"\0", start)].decode(errors="replace")


def elf_functions(path: str) -> set[str]:
    """Mangled names of the functions a 64-bit ELF shared object defines (.symtab, else .dynsym)."""
    return {_name(table, s) for table, starts in _defined(path) for s in starts}


@functools.lru_cache(maxsize=1)
def _demangler():
    lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
    fn = lib.__cxa_demangle
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    free = ctypes.CDLL(None).free
    free.argtypes = [ctypes.c_void_p]
    return fn, free


def demangle(name: str) -> str:
    """The C++ name Kineto reports a kernel by (libstdc++'s demangler, the one Kineto uses)."""
    try:
        fn, free = _demangler()
    except (OSError, AttributeError):
        return name
    status = ctypes.c_int()
    ptr = fn(name.encode(), None, None, ctypes.byref(status))
    if not ptr or status.value != 0:
        return name
    try:
        return ctypes.string_at(ptr).decode(errors="replace")
    finally:
        free(ptr)


#: Mangled names from the headers every extension includes (ATen, c10, torch, std, pybind11, CUB, Thrust):
#: thousands of inline instantiations that are not the candidate's kernels.
_HEADER_SYMBOLS = re.compile(r"^_ZN?K?(?:2at|3c10|5torch|St|8pybind11|9__gnu_cxx|3cub|6thrust)|^_ZSt|^_GLOBAL__|^__")


_IDENT = re.compile(r"[A-Za-z_]\w*")
_KEYWORDS = frozenset("void bool char short int long float double signed unsigned const volatile struct class enum "
                      "typename".split())
#: A kernel in these namespaces could never be the candidate's: its symbol is one `_HEADER_SYMBOLS` skips.
_HEADER_KERNEL = re.compile(r"^(?:void )?(?:at|c10|torch|std|pybind11|__gnu_cxx|cub|thrust)::")


def _keys(name: str) -> set[bytes]:
    """Byte strings one of which the mangled symbol of a function Kineto calls ``name`` must hold: its own
    identifier spelled ``<length><identifier>`` (any identifier of the name that is no keyword and no
    qualifier, as a function's own never is), or the name itself for an ``extern "C"`` one."""
    keys = {f"{len(m[0])}{m[0]}".encode() for m in _IDENT.finditer(name)
            if m[0] not in _KEYWORDS and not name.startswith("::", m.end())}
    return keys | {name.encode()}


def candidate_symbols(so_paths: list[str], kernels) -> set[str]:
    """The kernels among ``kernels`` (named as Kineto names them: demangled) that the candidate's extensions
    define.

    Only a function whose mangled name could be one of them is demangled (see `_keys`): a CUDA extension
    defines thousands of functions (nvcc's stubs, pybind11, inline ATen), and demangling them all cost
    50 ms of each verification on an H100."""
    wanted = {n for n in kernels if not _HEADER_KERNEL.match(n)}
    if not wanted:
        return set()
    keys = set().union(*map(_keys, wanted))
    found: set[str] = set()
    for path in dict.fromkeys(so_paths):
        for table, starts in _defined(path):
            seen: set[int] = set()
            for key in keys:
                pos = table.find(key)
                while pos >= 0:
                    # the string holding this hit, and the function names inside it (a linker may point a
                    # name at the tail of a longer string)
                    first = bisect.bisect_left(starts, table.rfind(b"\0", 0, pos) + 1)
                    seen.update(starts[first:bisect.bisect_right(starts, pos)])
                    pos = table.find(key, pos + 1)
            for start in seen:
                name = _name(table, start)
                if not _HEADER_SYMBOLS.match(name) and (plain := demangle(name)) in wanted:
                    found.add(plain)
    return found


def origin_of(name: str, own: set[str]) -> str:
    if name in own:
        return "candidate"
    if _LIBRARY.search(name):
        return "library"
    if _TORCH.search(name):
        return "torch"
    return "unknown"


# -- reading a profile ------------------------------------------------------------------------------
def spans(events, window: str | None = None) -> dict[str, tuple[float, float]]:
    """Each section's span on the host's timeline (`REFERENCE`, `CANDIDATE`); with ``window``, the span of the
    first range of that name inside it instead (a training step's forward or backward pass,
    `kforge.verify.backward`). A section without that range has no span."""
    from torch.autograd import DeviceType
    host = [e for e in events if getattr(e, "device_type", DeviceType.CPU) == DeviceType.CPU]
    out = {e.name: (e.time_range.start, e.time_range.end) for e in host if e.name in (REFERENCE, CANDIDATE)}
    if window is None:
        return out
    inner = {}
    for name, (lo, hi) in out.items():
        found = [e for e in host if e.name == window and lo <= e.time_range.start <= hi]
        if found:
            inner[name] = (found[0].time_range.start, found[0].time_range.end)
    return inner


def _section(event, where: dict[str, tuple[float, float]]) -> str | None:
    """The section an event started in, by time: a backward pass's operators run on autograd's threads, which
    the profile does not nest under the section's range (``cpu_parent``)."""
    start = event.time_range.start
    for name, (lo, hi) in where.items():
        if lo <= start <= hi:
            return name
    return None


#: Allocations: every kernel needs its output, and on a CPU (no device timeline to leave them off) allocating a
#: large one took a third of a small ReLU's time, enough to move the kernel share across `strict`'s minimum.
_ALLOCATIONS = frozenset({"aten::empty", "aten::empty_like", "aten::empty_strided"})
#: Operators whose own time is the dispatch of a view or a no-op (a copy they make is a child's: ``aten::clone``,
#: ``aten::_to_copy``): on a small problem a candidate's ``.view`` and ``.to(dtype)`` of a tensor already in it took
#: 14% of its forward on a CPU, and put a kernel doing all the computing under the strict rules' 90%.
_METADATA = frozenset({"aten::view", "aten::_unsafe_view", "aten::_reshape_alias", "aten::reshape", "aten::as_strided",
                       "aten::alias", "aten::detach", "aten::detach_", "aten::lift_fresh", "aten::t", "aten::transpose",
                       "aten::permute", "aten::expand", "aten::slice", "aten::select", "aten::unsqueeze",
                       "aten::squeeze", "aten::narrow", "aten::flatten", "aten::split", "aten::chunk", "aten::to",
                       "aten::contiguous", "aten::resolve_conj", "aten::resolve_neg", "aten::numpy_T"})


def _bookkeeping(name: str) -> bool:
    """The autograd engine's own ranges (``autograd::engine::evaluate_function: ReluBackward0``): they hold the
    operators a backward node runs, and are none; allocations, which compute nothing; and views (`_METADATA`)."""
    return name.startswith("autograd::") or name in _ALLOCATIONS or name in _METADATA


def _annotation(event) -> bool:
    """A range on the device's timeline, not a kernel: ``record_function`` ranges, such as torch.compile's
    ``## Call CompiledFxGraph ... ##`` (taken for an unknown kernel of the candidate's, it once made a
    candidate whose own kernels never ran look as if they did)."""
    return bool(getattr(event, "is_user_annotation", False)) or event.name.startswith("## ")


def _inside_call(event) -> bool:
    e = event.cpu_parent
    while e is not None and e.name != CANDIDATE:
        if e.name.startswith("kforge::") and e.name not in (REFERENCE, CANDIDATE):
            return True
        e = e.cpu_parent
    return False


def _elements(event) -> int:
    total = 0
    for shape in getattr(event, "input_shapes", None) or []:
        if isinstance(shape, (list, tuple)) and shape and all(isinstance(d, int) for d in shape):
            n = 1
            for d in shape:
                n *= d
            total += n
    return total


def _ops(events, cuda: bool, where: dict[str, tuple[float, float]]) -> dict[str, dict[str, list[float]]]:
    """Per section: PyTorch operator -> [calls, microseconds, input elements] (the microseconds are the
    device time of the kernels it launched on a GPU, its self time on a CPU)."""
    out: dict[str, dict[str, list[float]]] = {REFERENCE: defaultdict(lambda: [0, 0.0, 0]),
                                               CANDIDATE: defaultdict(lambda: [0, 0.0, 0])}
    for e in events:
        if e.name.startswith("kforge") or "::" not in e.name or _bookkeeping(e.name):
            continue
        if cuda and not e.kernels:
            continue
        sec = _section(e, where)
        if sec is None:
            continue
        row = out[sec][e.name]
        row[0] += 1
        row[1] += sum(k.duration for k in e.kernels) if cuda else e.self_cpu_time_total
        row[2] += _elements(e)
    return out


def attribute(events, cuda: bool, so_paths: list[str], triton_names: set[str],
              window: str | None = None) -> tuple[Attribution, dict]:
    """The candidate section's attribution from a profile's function events, and the operator tables of both
    sections (for `replayed`). ``so_paths``: the candidate's extensions; ``triton_names``: its Triton kernels;
    ``window``: a range inside each section to read alone (see `spans`)."""
    from torch.autograd import DeviceType
    events = list(events)
    where = spans(events, window)
    uses: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    if cuda:
        lo, hi = where.get(CANDIDATE, (float("inf"), float("-inf")))
        device = [e for e in events if e.device_type == DeviceType.CUDA]
        calls = [(e.time_range.start, e.time_range.end) for e in device
                 if e.name.startswith("kforge::") and e.name not in (REFERENCE, CANDIDATE)]
        ran = [e for e in device if not e.name.startswith("kforge") and not _annotation(e)
               and lo <= e.time_range.start <= hi]
        own = candidate_symbols(so_paths, {e.name for e in ran}) | set(triton_names)
        for e in ran:
            start = e.time_range.start
            origin = origin_of(e.name, own)
            inside = any(a <= start <= b for a, b in calls)
            if inside and (origin == "unknown" or _CUTE_DSL_KERNEL.match(e.name)):
                # launched inside one of the candidate's calls, by no known library, or compiled by CuTe DSL
                # from the candidate's @cute.kernel (the DSL's names say cutlass, as a CUTLASS library's do)
                origin = "candidate"
            row = uses[(e.name, origin)]
            row[0] += 1
            row[1] += e.time_range.end - start
        if not uses:  # no measurement: say what the profile held, so a profiler that saw nothing is visible
            found = summarise(uses)
            found.notes.append(f"the profile attributed no device kernel: {len(device)} device event(s) in all, "
                               f"{len(events)} event(s), the candidate's range {lo:.0f}-{hi:.0f} us, device events "
                               f"at {', '.join(f'{e.time_range.start:.0f}' for e in device[:6]) or 'none'} us")
            return found, _ops(events, cuda, where)
    else:
        uses = _host_uses(e for e in events if _section(e, where) == CANDIDATE)
        if window is None:
            _least(uses, [_host_uses(e for e in events if lo <= e.time_range.start <= hi)
                          for lo, hi in _again_spans(events)])
    return summarise(uses), _ops(events, cuda, where)


def _host_uses(events) -> dict[tuple[str, str], list[float]]:
    """Calls and self time per (operator, origin) among a CPU section's events."""
    uses: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    for e in events:
        if e.name in (CANDIDATE, AGAIN) or _bookkeeping(e.name):
            continue
        if e.name.startswith("kforge::"):
            key = (e.name[len("kforge::"):], "candidate")
        elif "::" in e.name:
            origin = origin_of(e.name, set())
            # an operator of no known library inside one of the candidate's calls: its own, registered with
            # TORCH_LIBRARY and called as torch.ops.NS.OP (the call's range holds only the dispatch)
            key = (e.name, "candidate" if origin == "unknown" and _inside_call(e) else origin)
        else:
            continue
        row = uses[key]
        row[0] += 1
        row[1] += e.self_cpu_time_total
    return uses


def _again_spans(events) -> list[tuple[float, float]]:
    return [(e.time_range.start, e.time_range.end) for e in events if e.name == AGAIN]


def _least(uses: dict[tuple[str, str], list[float]], repeats: list[dict[tuple[str, str], list[float]]]) -> None:
    """Each operator's time in the judged call lowered to its least over the calls before it, where one made as
    many calls to it: on a CPU the scheduler only ever adds time to a call (a thread descheduled inside an OpenMP
    region holds up the whole region), so the least is the one least disturbed by whatever else the machine ran.
    Operators the judged call ran and a repeat did not keep their time from the judged call."""
    for row_key, row in uses.items():
        for repeat in repeats:
            other = repeat.get(row_key)
            if other is not None and other[0] == row[0]:
                row[1] = min(row[1], other[1])


def summarise(uses: dict[tuple[str, str], list[float]]) -> Attribution:
    total_us = sum(t for _, t in uses.values())
    shares: dict[str, float] = defaultdict(float)
    for (_, origin), (_, t) in uses.items():
        shares[origin] += t / total_us if total_us else 0.0
    top = sorted(uses.items(), key=lambda kv: -kv[1][1])[:8]
    return Attribution(
        kernel_share=shares.get("candidate", 0.0) if total_us else None,
        shares={k: round(v, 4) for k, v in shares.items()}, total_ms=total_us / 1e3,
        top=[KernelUse(name=n[:160], origin=o, ms=round(t / 1e3, 5), calls=int(c),
                       share=round(t / total_us, 4) if total_us else 0.0) for (n, o), (c, t) in top])


#: Operators that move or allocate data without computing: never enough, alone, to say the reference re-ran.
LAYOUT = frozenset({"aten::copy_", "aten::contiguous", "aten::clone", "aten::to", "aten::_to_copy", "aten::fill_",
                    "aten::zero_", "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::zeros",
                    "aten::zeros_like", "aten::ones", "aten::view", "aten::reshape", "aten::as_strided",
                    "aten::resize_", "aten::detach", "aten::lift_fresh", "aten::set_", "aten::t",
                    "aten::transpose", "aten::permute", "aten::expand", "aten::slice", "aten::select",
                    "aten::unsqueeze", "aten::squeeze", "aten::flatten", "aten::_unsafe_view", "aten::cat",
                    "aten::stack", "aten::split", "aten::chunk", "aten::narrow", "aten::alias"})


def replayed(ops: dict[str, dict[str, list[float]]], min_share: float = 0.01) -> list[str] | None:
    """The reference's computing operators when the candidate's forward ran every one of them in PyTorch,
    as often and on at least half as many input elements; None when at least one was replaced. Operators
    taking under ``min_share`` of the reference's time, and layout operators, do not count; a library's
    operator (a BLAS GEMM) does not make the others small: an operator is also counted where it takes
    ``min_share`` of the time of the reference's operators other than the library's, so that a GEMM of
    K = 8192 in PyTorch with the candidate's own GroupNorm and Swish after it (each well under 1% of the
    reference's time, together ~2%, a share that moved with the machine's load) is a library GEMM with its own
    epilogue, not a replay."""
    ref, cand = ops[REFERENCE], ops[CANDIDATE]
    total = sum(row[1] for row in ref.values())
    if total <= 0:
        return None
    computing = {name: row for name, row in ref.items() if name not in LAYOUT}
    rest = sum(row[1] for name, row in computing.items() if not _LIBRARY.search(name))
    significant = {name: row for name, row in computing.items() if row[1] >= min_share * total
                   or (not _LIBRARY.search(name) and row[1] >= min_share * rest)}
    if not significant:
        return None
    for name, (n, _, elements) in significant.items():
        cn, _, ce = cand.get(name, (0, 0.0, 0))
        if cn < n or ce < 0.5 * elements:
            return None
    return sorted(significant)
