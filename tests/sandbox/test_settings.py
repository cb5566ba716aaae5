"""Process settings: strict numerics for correctness, PyTorch's defaults for timed baselines, and a
candidate's speed settings kept out of the reference's runs."""

import torch

from kforge.sandbox.settings import Settings, Swap


def test_strict_default_and_the_candidates_own_state():
    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark, torch.get_num_threads())
    try:
        torch.backends.cudnn.allow_tf32 = True  # PyTorch's default
        s = Settings(torch)
        s.use_strict(threads=2)
        assert torch.backends.cudnn.allow_tf32 is False and s.defaults["torch.backends.cudnn.allow_tf32"] is True
        # The candidate turns on a speed setting and uses one thread.
        torch.backends.cudnn.benchmark = True
        torch.set_num_threads(1)
        with Swap(s, "default"):  # a timed baseline: PyTorch's numerics, the harness's neutral settings
            assert torch.backends.cudnn.allow_tf32 is True and torch.backends.cudnn.benchmark is False
            assert torch.get_num_threads() == 2
        with Swap(s, "strict"):  # the correctness reference
            assert torch.backends.cudnn.allow_tf32 is False and torch.backends.cudnn.benchmark is False
        # ... and the candidate gets its own back.
        assert torch.backends.cudnn.benchmark is True and torch.get_num_threads() == 1
        assert s.loosened() is None
        torch.backends.cudnn.allow_tf32 = True
        assert s.loosened() == ("torch.backends.cudnn.allow_tf32", False)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = saved[0], saved[1]
        torch.set_num_threads(saved[2])
