"""The problem audit: what a reference program is like, measured once per (problem, size, device).

Runs in a verifier worker after the reference is built and before any candidate code is imported (so
its result can be cached from there). It answers:

* ``stochastic``: two runs on the same inputs differ beyond the tolerance, or the first drew from torch's RNG
  and the two differ at all (dropout in training mode, however small its outputs).
  Verification then seeds torch's RNG identically before the reference and the candidate.
* ``degenerate``: the output is constant on one of the draws, or one draw's output passes as another's
  within the tolerance, so a constant "kernel" would pass (the trials refuse a constant output only where
  the reference's varies). One constant draw is enough: a matmul-subtract-ReLU whose shift sends nearly every
  value below zero is all zeros on most draws and not on others, and was not flagged while the audit asked
  for every draw to be constant. Tables list such problems apart. Where a constant would pass KernelBench's
  comparison and not the kforge rules' (at bf16, its 1e-2 against a softmax's outputs near 1e-5; the kforge view
  holds the tolerance to the outputs' size), the flag is ``degenerate_kernelbench``, and only the kernelbench
  rows' figures leave the problem out.
* ``launch_bound``: the reference runs under 20 microseconds.
* ``stateful``: the reference's forward reassigns a module attribute (a hidden state it keeps between calls:
  `kforge.verify.stateful`), or changes a tensor or a plain value it holds (a counter, a list of past batches)
  in place and its output follows it. The draws above then run on fresh reference instances, one call each, so
  the state is not mistaken for randomness or a constant.
* memory: bytes of one input set, of the outputs, of parameters, and the peak of one forward.
* FLOPs (``torch.utils.flop_counter``; matrix products and convolutions only) and the fewest bytes a
  forward moves (inputs and parameters read once, outputs written once), for problems that declare none.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from pathlib import Path

from .compare import Mismatch, as_outputs, compare_tensor, is_constant
from .protocol import ProblemAudit
from .stateful import STATEFUL, changed_in_place, held_tensors, held_values, reassigned, values_changed, versions

LAUNCH_BOUND_MS = 0.02
DRAWS = 5
"""Input draws the degenerate test runs the reference on."""
VERSION = 9
"""Of the audit's answers: an audit cached by an older version is run again."""


def cache_path(cache_dir: str, problem_source: str, device: str, torch_version: str, numerics: str = "fp32") -> Path:
    """Where the audit of this problem on this device is kept; ``numerics`` says how its inputs were cast (the
    precision, and whether integer inputs were too)."""
    key = hashlib.sha256(json.dumps([VERSION, problem_source, device, torch_version, numerics]).encode()).hexdigest()
    key = key[:24]
    return Path(cache_dir) / "audit" / f"{key}.json"


def _nbytes(torch, items) -> int:
    return sum(x.untyped_storage().nbytes() for x in items if isinstance(x, torch.Tensor))


def _same(torch, a: list, b: list, tolerance) -> bool:
    """Whether output lists a and b would pass as each other (the verifier's own comparison; ``tolerance`` of the
    dtype's name, or of the dtype's name and the expected tensor)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if not isinstance(x, torch.Tensor):
            if x != y:
                return False
            continue
        if not isinstance(y, torch.Tensor) or x.shape != y.shape or x.dtype != y.dtype:
            return False
        dtype = str(y.dtype).removeprefix("torch.")
        atol, rtol = tolerance(dtype, y) if getattr(tolerance, "per_tensor", False) else tolerance(dtype)
        try:
            compare_tensor(x, y, atol, rtol)
        except Mismatch:
            return False
    return True


def _rng_states(torch, cuda: bool) -> tuple:
    """torch's global generators' states (CPU, and the current CUDA device's): a forward that draws moves them."""
    cpu = bytes(torch.get_rng_state().numpy())
    return (cpu, bytes(torch.cuda.get_rng_state().numpy())) if cuda else (cpu,)


def _identical(torch, a: list, b: list) -> bool:
    """Element for element equal (NaN equal to NaN), for every tensor of two output lists of one structure."""
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or not bool(((x == y) | (x.isnan() & y.isnan()) if x.is_floating_point()
                                               else x == y).all()):
                return False
    return True


def _constant(torch, outs: list) -> bool:
    tensors = [o for o in outs if isinstance(o, torch.Tensor) and o.numel() > 1]
    return bool(tensors) and all(is_constant(t) for t in tensors)


def _tensors(torch, outs) -> list:
    if isinstance(outs, torch.Tensor):
        return [outs]
    return [t for o in outs for t in _tensors(torch, o)] if isinstance(outs, (list, tuple)) else []


def _something_to_compare(torch, outs: list) -> None:
    """A reference whose forward returns no tensor, or only empty ones (a size set to 0), passes any candidate:
    the problem's error, before any is judged (an honest kernel at ``--set BATCH=0`` read as `cheat_detected`)."""
    tensors = _tensors(torch, outs)
    if not tensors:
        raise ValueError(f"its forward returns no tensor ({type(outs[0]).__name__ if len(outs) == 1 else 'nothing'}"
                         "): there is no output to compare a candidate's with")
    if all(t.numel() == 0 for t in tensors):
        raise ValueError(f"its outputs are empty at these sizes (shape {tuple(tensors[0].shape)}): a size of 0 "
                         "leaves nothing to compare")


def _kforge_view(h):
    """The kforge rules' tolerance for an expected tensor (held to its size, at a reduced precision derived from the
    unit roundoff: `kforge.verify.numerics`), as `_same` takes it; None where the harness has no views."""
    of = getattr(h, "_tolerance", None)
    if of is None:
        return None

    def tolerance(dtype: str, y) -> tuple[float, float]:
        return of("kforge", y, 0, [y])
    tolerance.per_tensor = True
    return tolerance


def _follows_history(h, forward, inputs: list, first: list, tolerance) -> bool:
    """Whether a reference that changed something it holds answers ``inputs`` otherwise after a call on other
    inputs: a model that centres each batch by the mean of every batch it has seen answers the same batch twice
    alike, and not after another batch."""
    forward(h.inputs(h.draw()))
    return not _same(h.torch, forward(h._clone(inputs)), first, tolerance)


def run(h) -> ProblemAudit:
    """Audit the reference loaded in harness ``h`` (a `kforge.sandbox.harness.Harness` after load_reference)."""
    torch = h.torch
    model = h.ref_model
    tolerance = lambda dt: h.cfg.tolerance(dt, h.problem.tolerance)  # noqa: E731
    cuda = h.device.type == "cuda"

    state: list[str] = []

    def forward(inputs):
        # A stateful reference answers from its history: each draw then gets a fresh instance, called once.
        m = h._construct(h.ref_mod.Model) if state else model
        out = [o.clone() if isinstance(o, torch.Tensor) else o for o in as_outputs(m(*inputs))]
        h.clock.sync()
        return out

    flags: list[str] = []
    with torch.no_grad():
        inputs = h.inputs(h.draw())
        params = list(model.parameters()) + list(model.buffers()) if isinstance(model, torch.nn.Module) else []
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        held, values = held_tensors(torch, model), held_values(torch, model)
        held_versions = versions(held)
        rng = _rng_states(torch, cuda)
        first = forward(h._clone(inputs))
        _something_to_compare(torch, first)
        drew = _rng_states(torch, cuda) != rng
        peak = (torch.cuda.max_memory_allocated() - base) if cuda else None
        after = held_tensors(torch, model)
        state[:] = reassigned(held, after)
        in_place = changed_in_place(held_versions, after) + values_changed(values, held_values(torch, model))
        del held, after
        if state:
            flags.append(STATEFUL)
        second = forward(h._clone(inputs))
        differs = not _same(torch, second, first, tolerance)
        if not state and in_place and not drew and (differs or _follows_history(h, forward, inputs, first, tolerance)):
            # its output follows what it changed in place: a history, not randomness (seen judging a model
            # against itself: a running mean in a buffer failed a timing recheck as `numerical_mismatch`). The
            # second call again, now on a fresh instance, is what says whether it is random too.
            state[:] = in_place
            flags.append(STATEFUL)
            second = forward(h._clone(inputs))
            differs = not _same(torch, second, first, tolerance)
        # Random numbers that reach the output make it stochastic, however small the output: a softmax after a
        # dropout at bf16 lies within 1e-2 of any other draw's (`_same`), and was then compared unseeded.
        stochastic = differs or (drew and not _identical(torch, second, first))
        del second
        if stochastic:
            flags.append("stochastic")
        constant, same, kforge_same = int(_constant(torch, first)), True, True
        kforge_tolerance = _kforge_view(h)
        for _ in range(DRAWS - 1):  # one other draw's output at a time: big problems fill the device
            other = forward(h.inputs(h.draw()))
            constant += _constant(torch, other)
            same = same and _same(torch, other, first, tolerance)
            kforge_same = kforge_same and (kforge_tolerance is None or _same(torch, other, first, kforge_tolerance))
            del other
        if constant or (same and kforge_same):
            flags.append("degenerate")
        elif same:  # a constant passes KernelBench's comparison, not the kforge rules' (bf16's 1e-2 against a
            # softmax's outputs near 1e-5): only the kernelbench rows' figures leave it out
            flags.append("degenerate_kernelbench")
        times = []
        for _ in range(5):
            dev_ms, _, out = h.clock.time(lambda: model(*inputs))
            del out
            times.append(dev_ms)
        ref_ms = statistics.median(times)
        if ref_ms < LAUNCH_BOUND_MS:
            flags.append("launch_bound")
        flops, counted = None, False
        try:
            from torch.utils.flop_counter import FlopCounterMode
            counter = FlopCounterMode(display=False)
            with counter:
                model(*inputs)
            flops, counted = float(counter.get_total_flops()) or None, True
        except Exception:  # noqa: BLE001 - an operator the counter cannot trace: no FLOPs, still bytes
            pass
    in_bytes, out_bytes, param_bytes = _nbytes(torch, inputs), _nbytes(torch, first), _nbytes(torch, params)
    return ProblemAudit(flags=flags, state=state, constant_draws=[constant, DRAWS], ref_ms=round(ref_ms, 6), flops=flops,
                        counted=counted,
                        bytes=float(in_bytes + param_bytes + out_bytes), out_bytes=float(out_bytes),
                        input_bytes=in_bytes, param_bytes=param_bytes, peak_bytes=peak, device=h.device_name())
