"""Did the candidate's kernels compute the output? Tracked once, in one correctness trial.

`Dataflow` is a ``TorchDispatchMode`` that follows memory (by storage) through one forward call:

* every PyTorch operator passes "derived from the candidate's kernels" from what it reads to what it
  writes (its outputs, and arguments its schema marks as written);
* every call into the candidate's kernels (an extension function, a Triton launch, an operator the
  candidate registered itself) is fingerprinted before and after: memory whose contents it changed,
  and tensors it returns that no PyTorch operator inside it produced, become derived;
* allocations start clean.

An output nothing derived reaches was computed by PyTorch alone, whatever kernels ran beside it: a kernel
launched on a dummy tensor, a result thrown away, a C++ "kernel" that calls ``torch::relu``. The answer is
None (undetermined) where writes can escape the tracking: CUDA graph replays, code ``torch.compile``
generated, kernels launched by means no hook sees.

Kernels that work on memory of their own API (OpenCL buffers) are followed there too: the recorder hands each
call the buffers it was given (objects with a ``key`` and a ``fingerprint()``, and the ``host`` memory a buffer
over host memory aliases); a buffer whose contents a kernel changed derives from the candidate's kernels, and
`transfer` carries that through copies between such buffers and host memory (a torch tensor's storage, or a
NumPy array a tensor is later made over). Host memory written from derived buffers is remembered by its bytes'
digest too, so a tensor copied from it (``torch.tensor(array)``) derives as well.

Fingerprints are a wrapping integer sum over a storage's 64-bit words (over the whole storage, so a write
outside the view passed still shows); a kernel that rewrites memory with the very same values leaves no
trace, and it changed nothing either. That is undetermined too in one case: memory filled with a constant
(``torch.zeros``, ``fill_``) that a candidate's kernel was handed or allocated, and left as it was, where the
output is that constant. An honest kernel writing every output of a problem whose answer is all zeros leaves
exactly that, so such an output is neither derived nor PyTorch's (`Dataflow.notes` says which).
"""

from __future__ import annotations

import hashlib
import weakref
from typing import Any, Callable, Hashable, Sequence

from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ..sandbox.budget import check as check_budget
from .deadcode import Signer

#: Operator namespaces that are PyTorch's own; an operator from any other was registered by the candidate.
TORCH_NAMESPACES = frozenset({"aten", "prims", "prim", "_c10d_functional", "c10d", "profiler", "_ops", "quantized",
                              "rngprims", "higher_order", "inductor", "_dynamo", "debugprims", "mkldnn", "_quantized"})
ALLOCATIONS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
                         "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like",
                         "new_full", "scalar_tensor", "lift_fresh"})
#: In-place operators that replace all of what they write (``copy_`` of a whole tensor, ``fill_``...).
OVERWRITES = frozenset({"copy_", "fill_", "zero_", "normal_", "uniform_", "random_", "bernoulli_"})
#: Operators that leave a constant in what they write: a kernel writing that constant again leaves no trace.
FILLS = frozenset({"zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like",
                   "new_full", "scalar_tensor", "fill", "fill_", "zero_"})


def _key(t) -> tuple[str, int]:
    return t.device.type, t.untyped_storage().data_ptr()


def _whole(t) -> bool:
    """Whether a tensor covers its whole storage (writing it leaves nothing of the old contents)."""
    return t.is_contiguous() and t.storage_offset() == 0 and \
        t.numel() * t.element_size() == t.untyped_storage().nbytes()


class Dataflow(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Newer torch wraps a mode's __torch_dispatch__ so dynamo skips it, importing dynamo (5 s in a light
        # worker on an H100) at the first operator. Nothing is compiled inside this trial's frames.
        return False

    def __init__(self, torch, sync: Callable[[], None], answers: Sequence[Any] = (), inputs: Sequence[Any] = ()):
        super().__init__()
        self.torch = torch
        self.sync = sync
        self.answers = [a for a in answers if isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel()]
        """The reference's outputs of this trial: an argument of the candidate's kernel that holds one already was
        computed by other code (`handed`)."""
        self.inputs = {_key(t) for t in inputs if isinstance(t, torch.Tensor)}
        self.handed: str | None = None
        """What held the answer when the candidate's kernel was handed it (PyTorch's or NumPy's result, copied)."""
        self.derived: dict[tuple[str, int], bool] = {}
        """Storage -> whether its contents derive from something the candidate's kernels wrote."""
        self.seen: dict[tuple[str, int], tuple[int, Any]] = {}
        """Storage -> (size in bytes, weak reference to a tensor over it), for kernels given raw pointers."""
        self._inside: list[dict[tuple[str, int], Any]] = []
        """Per open candidate call: storages PyTorch operators wrote inside it, with their fingerprints."""
        self._before: list[dict[tuple[str, int], Any]] = []
        """Per open candidate call: the fingerprints of its arguments when it started."""
        self.filled: dict[tuple[str, int], bool] = {}
        """Storage -> whether the last operator that wrote it filled it with a constant."""
        self.unsure: dict[tuple[str, int], bool] = {}
        """Storage -> whether it holds (or derives by PyTorch operators from) a fill that one of the candidate's
        kernels had and left as it was: whether the kernel wrote it cannot be told."""
        self.notes: list[str] = []
        """Why `reaches` could not tell, when it could not."""
        self.opaque: dict[Hashable, bool] = {}
        """Memory outside PyTorch (an OpenCL buffer, by its key) -> whether it derives from the candidate's kernels."""
        self.copies: set[bytes] = set()
        """Digests of host memory written from such derived memory, for tensors copied from it."""
        self.escaped = False
        """Whether some write went where nothing follows it (an OpenCL image, say): then no output is judged."""
        self.results = Signer(torch)
        """Signatures of what the candidate's kernels wrote or returned (`kforge.verify.deadcode`): a result no output
        derives from is compared with what the reference itself discards."""

    # -- fingerprints -----------------------------------------------------------------------------
    def fingerprint(self, t) -> tuple[int, ...]:
        torch = self.torch
        st = t.untyped_storage()
        n = st.nbytes()
        if n == 0:
            return (0,)
        raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(st)
        if n >= 8 and st.data_ptr() % 8 == 0:
            # One pass over 64-bit words: their sum weighs each word's two halves apart (like the two sums
            # below) at a third of the cost; it wraps, so any summation order gives the same fingerprint.
            whole = n - n % 8
            sums = [raw[:whole].view(torch.int64).sum()]
        else:
            whole = n - n % 4
            words = raw[:whole].view(torch.int32) if n >= 4 else raw[:0].to(torch.int32)
            sums = [words.sum(dtype=torch.int64), words[1::2].sum(dtype=torch.int64)]
        if whole < n:
            sums.append(raw[whole:].sum(dtype=torch.int64))
        return tuple(torch.stack(sums).tolist())  # one device synchronisation, not one per sum

    def _tensors(self, tree: Any) -> list:
        torch = self.torch
        return [x for x in tree_leaves(tree) if isinstance(x, torch.Tensor)]

    def _remember(self, t) -> None:
        k = _key(t)
        if k[1]:
            self.seen[k] = (t.untyped_storage().nbytes(), weakref.ref(t))

    # -- PyTorch operators ----------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # The attribution's budget, here too: a CUDA backward's operators run on autograd's own thread, which the
        # budget's alarm cannot interrupt, and under any dispatch mode torch 2.11 runs some formulas on their
        # composite-compliant paths (cumprod's backward: ten operators a column, 327,680 at 32768, O(n^2) work).
        check_budget()
        kwargs = kwargs or {}
        if func.namespace not in TORCH_NAMESPACES:
            return self.candidate_call(lambda: func(*args, **kwargs), args, kwargs)
        out = func(*args, **kwargs)
        outs = self._tensors(out)
        name = func._schema.name.split("::")[-1]
        if name == "set_":  # points a tensor at existing memory: writes nothing, but may expose a kernel's writes
            if self._inside:
                self._seen_written(outs)
            return out
        written = list(outs)
        overwritten = set()  # arguments written whole: their old contents do not feed the result
        if self._inside:
            self._seen_written(self._tensors((args, kwargs)))
        if name not in ALLOCATIONS:
            given = list(zip(func._schema.arguments, args)) + \
                [(a, kwargs[a.name]) for a in func._schema.arguments if a.name in kwargs]
            for a, value in given:
                if a.alias_info is not None and a.alias_info.is_write:
                    for t in self._tensors(value):
                        written.append(t)
                        if (name in OVERWRITES or a.name == "out") and _whole(t):
                            overwritten.add(id(t))
            read = [_key(t) for t in self._tensors((args, kwargs)) if id(t) not in overwritten]
            src = any(self.derived.get(k, False) for k in read)
            unsure = not src and any(self.unsure.get(k, False) for k in read)
        elif name == "lift_fresh" and outs:
            src, unsure = self._from_host(outs[0]), False
        else:
            src = unsure = False
        for t in written:
            k = _key(t)
            self.derived[k], self.unsure[k], self.filled[k] = src, unsure, name in FILLS
            self._remember(t)
        if self._inside:
            self.sync()
            for t in written:
                self._inside[-1][_key(t)] = self.fingerprint(t)
        return out

    def _seen_written(self, tensors: list) -> None:
        """Inside a candidate call, before an operator reads memory: did the candidate's code write it since
        we last looked? (Triton's interpreter, for one, computes into temporaries and copies them back.)"""
        inside, before = self._inside[-1], self._before[-1]
        for t in tensors:
            k = _key(t)
            last = inside.get(k, before.get(k))
            if last is not None and self.fingerprint(t) != last:
                self.derived[k] = True
                inside[k] = self.fingerprint(t)

    # -- the candidate's kernels ------------------------------------------------------------------
    def _pointees(self, tree: Any) -> dict:
        """Live tensors over the storages an integer argument points into (kernels handed ``x.data_ptr()``)."""
        ints = [x for x in tree_leaves(tree) if isinstance(x, int) and not isinstance(x, bool) and x > 4096]
        found = {}
        for k, (n, ref) in list(self.seen.items()):
            t = ref()
            if t is not None and any(k[1] <= p < k[1] + n for p in ints):
                found[k] = t
        return found

    def candidate_call(self, run: Callable[[], Any], args: tuple, kwargs: dict, memories: Sequence[Any] = ()) -> Any:
        """One call into the candidate's kernels; ``memories``: buffers of its kernel API that the call was given."""
        from torch.utils._python_dispatch import _disable_current_modes
        with _disable_current_modes():
            tensors = self._tensors((args, kwargs))
            for t in tensors:
                self._remember(t)
            self.sync()
            before = {_key(t): (t, self.fingerprint(t)) for t in tensors}
            pointees = {k: (t, self.fingerprint(t)) for k, t in self._pointees((args, kwargs)).items()
                        if k not in before}
            buffers = [(m, m.fingerprint()) for m in memories]
            if self.answers and self.handed is None:
                self._answer_handed([t for t, _ in list(before.values()) + list(pointees.values())],
                                    [m for m in memories if not self.opaque.get(m.key, False)])
        self._inside.append({})
        self._before.append({k: fp for k, (_, fp) in before.items()})
        try:
            out = run()
        finally:
            inside = self._inside.pop()
            self._before.pop()
        with _disable_current_modes():
            self.sync()
            for k, (t, fp) in list(before.items()) + list(pointees.items()):
                now = self.fingerprint(t)
                self._after_kernel(k, now != inside.get(k, fp))
                self._result(k, t, now != fp)
            for t in self._tensors(out):
                k = _key(t)
                self._remember(t)
                if k in inside:  # a PyTorch operator inside produced it: keep what it derived from...
                    self._after_kernel(k, self.fingerprint(t) != inside[k])  # ...unless a kernel wrote it after
                    self._result(k, t, True)
                elif k in before:  # an argument handed back
                    self._after_kernel(k, self.fingerprint(t) != before[k][1])
                else:  # memory no operator we saw produced: the candidate's own
                    self.derived[k] = True
                    self._result(k, t, True)
            for m, fp in buffers:
                if m.fingerprint() != fp:
                    self.opaque[m.key] = True
                    if getattr(m, "host", None) is not None:  # over host memory: it holds what the kernel wrote
                        self._set_host(m.host, True)
        return out

    def _answer_handed(self, tensors: list, buffers: list) -> None:
        """Whether memory the candidate's kernel is handed, written by no kernel of its own and no input of the
        problem, already holds an output's values: then other code computed the answer (``torch.clamp`` for a ReLU,
        NumPy on the host) and the kernel only carries it to the output."""
        torch = self.torch
        for t in tensors:
            k = _key(t)
            if not self.derived.get(k, False) and k not in self.inputs and t.is_floating_point() \
                    and self._holds_answer(t.detach()):
                self.handed = f"a {tuple(t.shape)} {str(t.dtype).removeprefix('torch.')} tensor"
                return
        for m in buffers:
            data = m.contents() if hasattr(m, "contents") else None
            for a in self.answers if data is not None else ():
                if data.nbytes == a.numel() * a.element_size():
                    t = torch.frombuffer(bytearray(data.tobytes()), dtype=a.dtype)
                    if self._holds_answer(t):
                        self.handed = f"a buffer of {data.nbytes} bytes"
                        return

    def _holds_answer(self, t) -> bool:
        torch = self.torch
        for a in self.answers:
            if t.numel() != a.numel():
                continue
            got = t.reshape(-1).to(device="cpu", dtype=torch.float64)
            want = a.reshape(-1).to(device="cpu", dtype=torch.float64)
            tol = 1e-2 if a.element_size() < 4 else 1e-4
            scale = float(want.abs().mean()) or 1.0
            if bool(torch.isfinite(got).all()) and bool(((got - want).abs() <= tol * (want.abs() + scale)).all()):
                return True
        return False

    def _result(self, k: tuple[str, int], t, changed: bool) -> None:
        """A value the candidate's call left (memory it changed, or handed back new) that derives from its kernels
        (their own writes, or, as under Triton's interpreter, PyTorch operators copying them in): its signature."""
        if changed and self.derived.get(k, False):
            self.results.add(t)

    # -- memory outside PyTorch (OpenCL buffers) ------------------------------------------------------
    def library_call(self, run: Callable[[], Any], memories: Sequence[Any]) -> Any:
        """A library's kernel on such memory (pyopencl's array arithmetic): what it writes derives from what it
        read, as a PyTorch operator's outputs do."""
        before = [(m, m.fingerprint()) for m in memories]
        out = run()
        changed = [m for m, fp in before if m.fingerprint() != fp]
        src = any(self.opaque.get(m.key, False) for m, _ in before if m not in changed)
        for m in changed:
            self.opaque[m.key] = src
        return out

    def transfer(self, run: Callable[[], Any], dst: Any, src: Any) -> Any:
        """A copy between buffers and host memory (``address``, ``nbytes`` and ``fingerprint()``; a buffer has
        ``key``): the destination derives from the candidate's kernels as the source did."""
        value = self._derived_of(src)
        out = run()
        if hasattr(dst, "key"):
            self.opaque[dst.key] = value
        else:
            self._set_host(dst, value)
        return out

    def untraced(self, what: str) -> None:
        """A write nothing follows: the output can then not be judged from the dataflow."""
        if not self.escaped:
            self.notes.append(f"the candidate's kernels wrote {what}: those writes cannot be traced")
        self.escaped = True

    def _storage_at(self, address: int) -> tuple[tuple[str, int], Any] | None:
        for k, (n, ref) in list(self.seen.items()):
            t = ref()
            if t is not None and k[0] == "cpu" and k[1] <= address < k[1] + n:
                return k, t
        return None

    def _derived_of(self, mem: Any) -> bool:
        if hasattr(mem, "key"):
            return self.opaque.get(mem.key, False)
        found = self._storage_at(mem.address)
        if found is not None:
            return self.derived.get(found[0], False)
        return any(self.derived.get(("cpu", a), False) for a in (mem.address, getattr(mem, "base", None)) if a)

    def _set_host(self, mem: Any, value: bool) -> None:
        """Host memory was written: a torch storage it lies in, or NumPy memory a tensor may later be made over
        (``torch.from_numpy`` keeps its address)."""
        found = self._storage_at(mem.address)
        if found is not None:
            k, t = found
            whole = k[1] == mem.address and mem.nbytes >= t.untyped_storage().nbytes()
            self.derived[k] = value if whole else (self.derived.get(k, False) or value)
            self.filled[k] = False
        else:
            for a in {mem.address, getattr(mem, "base", None) or mem.address}:
                self.derived[("cpu", a)] = value
        if value:
            self.copies.add(mem.fingerprint())

    def _from_host(self, t) -> bool:
        """Whether a tensor made from host memory (``torch.from_numpy``, ``torch.tensor(array)``) derives from the
        candidate's kernels: it lies over memory they wrote, or holds a copy of it."""
        if self.derived.get(_key(t), False):
            return True
        if not self.copies or t.device.type != "cpu" or not t.is_contiguous():
            return False
        from torch.utils._python_dispatch import _disable_current_modes
        with _disable_current_modes():
            data = t.detach().reshape(-1).view(self.torch.uint8).numpy()
        return hashlib.blake2b(data, digest_size=16).digest() in self.copies

    def _after_kernel(self, k: tuple[str, int], changed: bool) -> None:
        """Memory a candidate's call had: changed, it derives from its kernels; left holding a fill, whether a
        kernel wrote that same constant cannot be told."""
        if changed:
            self.derived[k], self.filled[k] = True, False
        elif self.filled.get(k, False):
            self.unsure[k] = True

    def next_pass(self, outputs: Any) -> bool | None:
        """`reaches` for one pass of a traced call (a training step's forward, whose outputs its backward reads),
        then forget what derives from the candidate's kernels so far, so the next pass is judged on what its own
        kernels write. Called while this mode is active (from inside the call): its own operators bypass it."""
        from torch.utils._python_dispatch import _disable_current_modes
        with _disable_current_modes():
            found = self.reaches(outputs)
        self.derived.clear()
        self.unsure.clear()
        return found

    def reaches(self, outputs: Any) -> bool | None:
        """Whether any output derives from something the candidate's kernels wrote; None where one may, and
        nothing can tell: it is a constant fill a candidate's kernel had and left as it was (see the module)."""
        from .compare import is_constant
        tensors = self._tensors(outputs)
        if any(self.derived.get(_key(t), False) for t in tensors):
            return True
        if self.escaped:
            return None
        unsure = [(i, t) for i, t in enumerate(tensors) if self.unsure.get(_key(t), False) and t.numel() > 0
                  and is_constant(t)]
        for i, t in unsure:
            self.notes.append(f"output {i} is the constant {float(t.reshape(-1)[0]):.6g}, as the memory held before "
                              "the candidate's kernel had it (a fill): whether the kernel wrote it cannot be told")
        return None if unsure else False
