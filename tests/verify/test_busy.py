"""A run whose device memory other processes held gives no verdict and is tried again (`kforge.verify.busy`,
`kforge.sandbox.memory`): the retry on CPU with scripted replies, the whole path on a GPU that a second process
fills (run without xdist workers there: make test-gpu)."""

import os
import subprocess
import sys
import time

import pytest

from kforge.problems import resolve_problem
from kforge.sandbox.memory import DeviceBusy
from kforge.sandbox.protocol import Reply
from kforge.verify import State, Verifier
from kforge.verify.busy import retry_while_busy
from tests.helpers import candidate, fast_config

BUSY = "the device ran out of memory while other processes held 122.0 GiB of its 139.8 GiB"


class Script:
    """Replies in order, and which slots each ask offered."""

    def __init__(self, *replies: Reply):
        self.replies, self.asked, self.slept = list(replies), [], []

    def ask(self, kinds):
        self.asked.append(list(kinds))
        return self.replies.pop(0)


def test_a_busy_run_is_asked_again_on_another_device_first_until_it_gives_a_verdict():
    s = Script(Reply(slot="cuda:0", busy=BUSY), Reply(slot="cuda:1", busy=BUSY), Reply(slot="cuda:0", result="verdict"))
    reply = retry_while_busy(s.ask, ["cuda:0", "cuda:1"], wait_s=300, sleep=s.slept.append, jitter=lambda: 0.0)
    assert reply.result == "verdict"
    assert s.asked == [["cuda:0", "cuda:1"], ["cuda:1"], ["cuda:0"]]
    assert s.slept == [5.0, 10.0]  # the pause doubles


def test_verifiers_sharing_a_gpu_do_not_try_again_in_step():
    s = Script(Reply(slot="cuda:0", busy=BUSY), Reply(slot="cuda:0", result="verdict"))
    retry_while_busy(s.ask, ["cuda:0"], wait_s=300, sleep=s.slept.append, jitter=lambda: 0.9)
    assert s.slept == [7.25]  # stretched by up to half: here 0.9 of that


def test_past_its_wait_the_verification_ends_without_a_verdict_and_says_how_long_it_tried():
    s = Script(*[Reply(slot="cuda:0", busy=BUSY)] * 3)
    now = [0.0]

    def sleep(seconds):
        s.slept.append(seconds)
        now[0] += seconds
    with pytest.raises(DeviceBusy, match=r"122.0 GiB .*tried 3 time\(s\) over 15 s \(verify.device_busy_wait_s, --busy-wait .*: 30 s\)"):
        retry_while_busy(s.ask, ["cuda:0"], wait_s=30, sleep=sleep, clock=lambda: now[0], jitter=lambda: 0.0)
    assert s.slept == [5.0, 10.0]  # a third pause (20 s) would pass the 30 s


def test_with_no_wait_a_busy_run_raises_at_once_and_a_verdict_is_returned_as_it_came():
    s = Script(Reply(slot="cuda:0", busy=BUSY))
    with pytest.raises(DeviceBusy, match="tried 1 time"):
        retry_while_busy(s.ask, ["cuda:0"], wait_s=0, sleep=s.slept.append)
    assert s.slept == []
    done = Script(Reply(slot="cpu", result="verdict"))
    assert retry_while_busy(done.ask, ["cpu"], wait_s=0).result == "verdict"


# -- on a GPU a second process fills ---------------------------------------------------------------------

HOG = """import sys, time, torch
free, total = torch.cuda.mem_get_info()
held = torch.empty(free - int(sys.argv[1]) * 2**30, dtype=torch.uint8, device="cuda")
print("holding", held.numel() >> 30, "GiB", flush=True)
time.sleep(float(sys.argv[2]))
"""

# The model's own demand is beyond any GPU: its failure is its verdict, however busy the device.
GREEDY = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        workspace = torch.empty(1 << 38, dtype=torch.float32, device=x.device)  # 1 TiB of scratch
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out + workspace[:1].sum() * 0
'''


@pytest.fixture
def hog():
    """Starts a process that holds all but ``leave`` GiB of the GPU's memory for ``seconds``."""
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        pytest.skip("holds nearly all of the GPU's memory: run without xdist workers (make test-gpu)")
    started = []

    def start(leave: int, seconds: float) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", HOG, str(leave), str(seconds)], stdout=subprocess.PIPE,
                                text=True)
        assert proc.stdout.readline().startswith("holding"), "the memory hog did not start"
        started.append(proc)
        return proc
    yield start
    for proc in started:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def big_relu():
    return resolve_problem("level1/1_ReLU", size="gpu", overrides={"BATCH": 1 << 14, "DIM": 1 << 16})  # 4 GiB


@pytest.mark.gpu
def test_a_gpu_other_processes_fill_gives_no_verdict_then_one_once_they_let_go(pool, hog, big_relu):
    first = hog(leave=6, seconds=600)  # 6 GiB left: not enough for the 4 GiB problem's inputs and outputs
    busy = Verifier(fast_config(device_busy_wait_s=0), pool=pool)
    with pytest.raises(DeviceBusy, match="other processes held"):
        busy.verify(big_relu, candidate("triton", "relu_ok.py"), "triton")
    # A program whose own demand is beyond the device is judged, busy device or not.
    small = resolve_problem("level1/1_ReLU", size="gpu", overrides={"BATCH": 256, "DIM": 8192})
    greedy = busy.verify(small, GREEDY, "triton")
    assert greedy.state is State.RUNTIME_ERROR, greedy.summary()
    assert "out of memory" in (greedy.message + (greedy.evidence.traceback or "")).lower()

    first.kill()
    first.wait()
    hog(leave=6, seconds=8)  # lets go after 8 s
    started = time.monotonic()
    verdict = Verifier(fast_config(device_busy_wait_s=120), pool=pool).verify(
        big_relu, candidate("triton", "relu_ok.py"), "triton")
    assert verdict.state is State.CORRECT, verdict.summary()
    assert time.monotonic() - started >= 5  # it waited for the memory
