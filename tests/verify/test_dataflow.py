"""The dataflow tracker on its own: which outputs derive from memory the candidate's kernels wrote."""

import ctypes

import torch

from kforge.verify.dataflow import Dataflow


def traced(fn):
    flow = Dataflow(torch, lambda: None)
    with flow:
        out = fn(flow)
    return flow.reaches(out)


def kernel(flow, fn, *args):
    """A call into 'the candidate's kernel': what the recorder routes extension calls through."""
    return flow.candidate_call(lambda: fn(*args), args, {})


def raw_relu(x, y):
    """Writes y through its raw pointer, out of the dispatcher's sight, as compiled code does."""
    vals = torch.relu(x).numpy().tobytes()  # computing is allowed here; the write below is what counts
    ctypes.memmove(y.data_ptr(), vals, len(vals))


def test_pytorch_alone_is_not_derived():
    x = torch.randn(64)
    assert traced(lambda f: torch.relu(x) * 2) is False


def test_a_kernel_writing_its_output_is_derived_and_flows_through_torch_ops():
    x = torch.randn(64)

    def run(f):
        y = torch.empty_like(x)
        kernel(f, raw_relu, x, y)
        return (y + 1).view(8, 8)  # a torch tail after the kernel keeps the derivation
    assert traced(run) is True


def test_a_kernel_on_a_dummy_tensor_does_not_make_torchs_answer_derived():
    x, dummy = torch.randn(64), torch.randn(4)

    def run(f):
        kernel(f, raw_relu, dummy, torch.empty_like(dummy))
        return torch.clamp(x, min=0)
    assert traced(run) is False


def test_cpp_that_calls_a_torch_operator_is_not_the_candidates_work():
    x = torch.randn(64)
    # The "extension" returns what torch::relu produced inside it: the operator is seen, its output kept.
    assert traced(lambda f: kernel(f, torch.relu, x)) is False


def test_a_no_op_write_leaves_no_trace_and_an_overwrite_removes_one():
    x = torch.randn(64)

    def noop(f):
        y = torch.relu(x)
        kernel(f, lambda t: t.mul_(1.0), y)  # same values back: nothing changed
        return y
    assert traced(noop) is False

    def overwritten(f):
        y = torch.empty_like(x)
        kernel(f, raw_relu, x, y)
        y.copy_(torch.relu(x))  # PyTorch's answer replaces the kernel's, whole
        return y
    assert traced(overwritten) is False


def test_raw_pointer_arguments_are_followed():
    x = torch.randn(64)

    def run(f):
        y = torch.empty_like(x)
        kernel(f, lambda a, b, n: raw_relu(x, y), x.data_ptr(), y.data_ptr(), x.numel())
        return y
    assert traced(run) is True


def test_an_operator_the_candidate_registered_counts_as_its_kernel():
    lib = torch.library.Library("kforge_test_flow", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")
    x = torch.randn(8)
    assert traced(lambda f: torch.ops.kforge_test_flow.twice(x)) is True


def test_fingerprints_see_any_changed_byte_of_any_storage():
    """One changed byte anywhere in a storage (8-byte aligned or not, whole words or a tail) changes its
    fingerprint and changing it back restores it (a storage is only ever compared with itself); swapped words
    differ."""
    flow = Dataflow(torch, lambda: None)
    for nbytes in (1, 3, 4, 7, 8, 12, 4096 + 5):
        for shift in (0, 1, 4):  # memory not at an 8-byte boundary: the storage's own pointer is misaligned
            buf = bytearray(range(256)) * (nbytes // 256 + 1)
            t = torch.frombuffer(buf, dtype=torch.uint8, count=nbytes - shift if nbytes > shift else nbytes,
                                 offset=shift if nbytes > shift else 0)
            before = flow.fingerprint(t)
            for at in {0, t.numel() // 2, t.numel() - 1}:
                t[at] += 1
                assert flow.fingerprint(t) != before, (nbytes, shift, at)
                t[at] -= 1
            assert flow.fingerprint(t) == before
    words = torch.tensor([1, 2, 3, 4], dtype=torch.int32)
    assert flow.fingerprint(words) != flow.fingerprint(torch.tensor([2, 1, 3, 4], dtype=torch.int32))
