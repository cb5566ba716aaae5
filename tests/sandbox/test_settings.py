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


def test_tf32_precision_and_kernelbench_numerics_for_the_candidate():
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (matmul.allow_tf32, cudnn.allow_tf32, cudnn.benchmark)
    try:
        matmul.allow_tf32, cudnn.allow_tf32 = False, True  # PyTorch's defaults
        s = Settings(torch)
        s.use_strict(tf32=True)  # verify.precision=tf32: the candidate's state has TF32 on
        assert matmul.allow_tf32 is True and cudnn.allow_tf32 is True
        with Swap(s, "exact"):  # the correctness reference: true fp32 whatever the precision
            assert matmul.allow_tf32 is False and cudnn.allow_tf32 is False
        s.use_strict()
        cudnn.benchmark = True  # the candidate's own speed setting, kept
        with Swap(s, "kernelbench"):  # KernelBench runs the candidate with PyTorch's defaults
            assert cudnn.allow_tf32 is True and matmul.allow_tf32 is False and cudnn.benchmark is True
        assert cudnn.allow_tf32 is False and cudnn.benchmark is True
        matmul.allow_tf32 = True  # a numerics flag the candidate set itself stays as it set it
        with Swap(s, "kernelbench"):
            assert matmul.allow_tf32 is True
    finally:
        matmul.allow_tf32, cudnn.allow_tf32, cudnn.benchmark = saved


def test_a_candidates_deterministic_mode_is_off_around_a_timed_baseline():
    s = Settings(torch)
    s.use_strict(threads=torch.get_num_threads())
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)  # the candidate's choice, slower for some operators
        with Swap(s, "default", timed=True):
            assert not torch.are_deterministic_algorithms_enabled()
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
        with Swap(s, "default"):  # a correctness reference keeps the trial's mode, as the candidate's call does
            assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


def test_what_a_candidate_sets_in_torchs_configuration_does_not_reach_the_isolated_reference():
    """torch's configuration modules keep their values in context variables: the compile reference, compiled and
    called through `Settings.isolated`, reads the harness's configuration, whatever the candidate assigned."""
    import torch.compiler.config as config  # a configuration module torch imports with itself
    s = Settings(torch)  # made before any candidate code, as the harness makes it
    before = config.dynamic_sources
    try:
        config.dynamic_sources = "kforge_candidate_value"  # the candidate tunes its own torch.compile
        seen = s.isolated(lambda: config.dynamic_sources)()
        assert seen == before and config.dynamic_sources == "kforge_candidate_value"
        # What the isolated code sets stays there too.
        s.isolated(setattr)(config, "job_id", "kforge-reference")
        assert config.job_id != "kforge-reference"
    finally:
        config.dynamic_sources = before
