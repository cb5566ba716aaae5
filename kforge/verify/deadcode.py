"""Computation a program throws away: is a candidate's discarded kernel result a decoy, or the reference's own
dead code mirrored?

The dataflow trial (`kforge.verify.dataflow`) finds a candidate whose kernels ran while no output derives from
what they wrote: most often a decoy (a launch on a dummy tensor while PyTorch computes the answer). But some
references compute a value and throw it away themselves: KernelBench's ``LSTMCn`` runs ``fc`` on the LSTM's output
and returns the cell state. A candidate that computes that same ``fc`` in its kernel and discards it, as the
reference does, deceives nobody.

The criterion is measured, not guessed: the reference runs once more, on the trial's inputs, under `Liveness`, a
dispatch mode that records which memory each operator reads and writes, with a signature of each result (shape,
dtype, the sum and the sum of absolute values, in float64); walking back from the outputs gives the operators no
output derives from. A discarded result is mirrored when every result of the candidate's kernels (their signatures,
recorded by the dataflow trial) matches one of those dead results in shape, dtype and value within the
tolerance. A kernel on a dummy tensor matches nothing the reference discards, and stays a decoy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

MAX_RESULTS = 256
"""Results recorded per trace at most; a trace that had more cannot be compared and counts as no mirror."""


@dataclass(frozen=True)
class Signature:
    """What a result was, compactly: enough to tell the same value computed twice from another."""

    shape: tuple[int, ...]
    dtype: str
    total: float
    abs_total: float

    def matches(self, other: "Signature", atol: float, rtol: float) -> bool:
        if self.shape != other.shape or self.dtype != other.dtype:
            return False
        n = 1
        for d in self.shape:
            n *= d
        slack = atol * n + rtol * other.abs_total
        return abs(self.total - other.total) <= slack and abs(self.abs_total - other.abs_total) <= slack


class Signer:
    """Signatures computed on the device as results appear (no synchronisation), read once at the end."""

    def __init__(self, torch):
        self.torch = torch
        self._pending: list[tuple[tuple[int, ...], str, Any]] = []
        self.overflow = False

    def add(self, t) -> int | None:
        """Record ``t``; its index, or None when it is not a value (empty) or too many were recorded."""
        torch = self.torch
        if t.numel() == 0 or t.is_complex() or t.dtype == torch.bool:
            return None
        if len(self._pending) >= MAX_RESULTS:
            self.overflow = True
            return None
        sums = torch.stack([t.sum(dtype=torch.float64), t.abs().sum(dtype=torch.float64)])
        self._pending.append((tuple(t.shape), str(t.dtype).removeprefix("torch."), sums))
        return len(self._pending) - 1

    def read(self, indices: list[int] | None = None) -> list[Signature]:
        picked = self._pending if indices is None else [self._pending[i] for i in indices]
        if not picked:
            return []
        values = self.torch.stack([s for _, _, s in picked]).tolist()  # one synchronisation
        return [Signature(shape, dtype, v[0], v[1]) for (shape, dtype, _), v in zip(picked, values)]


def _key(t) -> tuple[str, int]:
    return t.device.type, t.untyped_storage().data_ptr()


class Liveness(TorchDispatchMode):
    """Records one forward's operators (what memory each reads and writes, and its results' signatures)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # as Dataflow: nothing is compiled here, and importing dynamo costs seconds

    def __init__(self, torch):
        super().__init__()
        self.torch = torch
        self.signer = Signer(torch)
        self.ops: list[tuple[set, set, list[int]]] = []
        """Per operator: storages read, storages written, its results' indices in ``signer``."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        torch = self.torch
        ins = [x for x in tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
        outs = [x for x in tree_leaves(out) if isinstance(x, torch.Tensor)]
        written = {_key(t) for t in outs}
        for a, value in list(zip(func._schema.arguments, args)) + \
                [(a, kwargs[a.name]) for a in func._schema.arguments if a.name in kwargs]:
            if a.alias_info is not None and a.alias_info.is_write:
                written |= {_key(t) for t in tree_leaves(value) if isinstance(t, torch.Tensor)}
        read = {_key(t) for t in ins}
        results = [i for t in outs if (i := self.signer.add(t)) is not None]
        self.ops.append((read, written, results))
        return out

    def dead(self, outputs) -> list[Signature]:
        """Signatures of the results of every operator no output derives from."""
        torch = self.torch
        live = {_key(t) for t in tree_leaves(outputs) if isinstance(t, torch.Tensor)}
        dead: list[int] = []
        for read, written, results in reversed(self.ops):
            if written & live:
                live |= read
            else:
                dead += results
        return self.signer.read(sorted(dead))


def mirrored(h, kernel_results: list[Signature], seed: int, rng_seed: int | None) -> str | None:
    """Whether every result of the candidate's kernels is a value the reference computes and discards (on the
    trial's inputs, ``seed``): a description of what they mirror, or None (a decoy, or nothing to compare).
    ``h`` is the verification run (`kforge.verify.trials.Trials`)."""
    torch = h.torch
    values = [r for r in kernel_results if r.abs_total == r.abs_total]  # a NaN result never matches
    if not values or len(values) != len(kernel_results):
        return None
    with Liveness(torch) as live:
        refs = h.recheck_reference(h.inputs(seed), rng_seed)
    if live.signer.overflow:
        return None
    dead = live.dead(refs.exact + (refs.native or []))  # what both references return is live
    matched = []
    for r in values:
        atol, rtol = h.cfg.tolerance(r.dtype, h.problem.tolerance)
        hit = next((d for d in dead if r.matches(d, atol, rtol)), None)
        if hit is None:
            return None
        matched.append(f"{r.dtype}{list(r.shape)}")
    return ", ".join(matched)
