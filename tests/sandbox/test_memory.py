"""Whose device memory a run ran out of (`kforge.sandbox.memory`): the arithmetic, and the harness's measurement
through a stand-in for torch's CUDA calls (the real thing: tests/verify/test_busy.py on a GPU)."""

from types import SimpleNamespace

import pytest

from kforge.sandbox.memory import DeviceBusy, asked_bytes, busy_after, held_by_others

GIB = 1 << 30

# What torch said on an H200 shared with KernelBench's harness running eight evaluations beside kforge.
H200_MESSAGE = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which "
                "1.81 GiB is free. Process 1308 has 24.60 GiB memory in use. Including non-PyTorch memory, this "
                "process has 14.83 GiB memory in use. Of the allocated memory 14.23 GiB is allocated by PyTorch")


def test_the_allocation_torch_says_failed_is_read_from_its_message():
    assert asked_bytes(H200_MESSAGE) == 2 * GIB
    assert asked_bytes("Tried to allocate 512.00 MiB. GPU 0 ...") == 512 << 20
    assert asked_bytes("CUDA error: out of memory") == 0


def test_memory_other_processes_held_is_the_loads_and_the_programs_own_demand_is_not():
    # The H200's case: 122 GiB held by others, a 2 GiB allocation beside 14 GiB of the run's own.
    others = held_by_others(int(1.81 * GIB), int(139.8 * GIB), int(14.23 * GIB), 2 * GIB)
    assert others is not None and 120 * GIB < others < 123 * GIB
    # A program asking for more than the device holds fails on an idle device too: its verdict.
    assert held_by_others(70 * GIB, 80 * GIB, 8 * GIB, 100 * GIB) is None
    # ... and one that filled the device itself, with nothing else on it.
    assert held_by_others(1 * GIB, 80 * GIB, 77 * GIB, 2 * GIB) is None
    # Another process's CUDA context (half a GiB) is not what a 4 GiB allocation failed for.
    assert held_by_others(3 * GIB, 80 * GIB, int(74.5 * GIB), 4 * GIB) is None


class _OutOfMemoryError(RuntimeError):
    pass


def fake_torch(free: int, total: int, reserved: int):
    cuda = SimpleNamespace(mem_get_info=lambda device=None: (free, total), memory_reserved=lambda device=None: reserved)
    return SimpleNamespace(OutOfMemoryError=_OutOfMemoryError, cuda=cuda)


CUDA, CPU = SimpleNamespace(type="cuda"), SimpleNamespace(type="cpu")


def test_the_harness_measures_the_device_when_an_out_of_memory_error_reaches_it():
    torch = fake_torch(free=2 * GIB, total=140 * GIB, reserved=14 * GIB)
    busy = busy_after(torch, _OutOfMemoryError(H200_MESSAGE), CUDA)
    assert isinstance(busy, DeviceBusy)
    assert "other processes held 122.0 GiB of its 140.0 GiB" in str(busy)
    assert "this run held 14.0 GiB and asked for 2.0 GiB more" in str(busy)


@pytest.mark.parametrize("exc,device,free", [
    (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), CUDA, 2 * GIB),  # not torch's OOM error
    (_OutOfMemoryError(H200_MESSAGE), CPU, 2 * GIB),  # a CPU run: no device memory to share
    (_OutOfMemoryError(H200_MESSAGE), CUDA, 124 * GIB),  # raised by the program on an idle device
])
def test_other_errors_and_an_idle_device_leave_the_verdict_to_the_program(exc, device, free):
    assert busy_after(fake_torch(free=free, total=140 * GIB, reserved=14 * GIB), exc, device) is None


def test_a_device_that_cannot_say_leaves_the_verdict_as_it_was():
    def fails(device=None):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    torch = SimpleNamespace(OutOfMemoryError=_OutOfMemoryError,
                            cuda=SimpleNamespace(mem_get_info=fails, memory_reserved=fails))
    assert busy_after(torch, _OutOfMemoryError(H200_MESSAGE), CUDA) is None
