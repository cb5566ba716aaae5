"""``kforge-synthesize``: what the jobs of one sweep process share, and a config it refuses in one line."""


def test_the_jobs_of_a_sweep_share_one_worker_pool():
    """Hydra runs a sweep's jobs one after another in one process: their workers start once, not per job."""
    from types import SimpleNamespace

    from kforge.apps.synthesize import sweep_pool
    same = SimpleNamespace(gpus=None, build=1, spare=True)
    first = sweep_pool(same)
    try:
        assert sweep_pool(SimpleNamespace(gpus=None, build=1, spare=True)) is first
        first.close()  # a second Ctrl-C closed it under a job: the next job gets a fresh one
        again = sweep_pool(same)
        assert again is not first and not again.closed
        other = sweep_pool(SimpleNamespace(gpus=[], build=2, spare=False))  # other workers: a pool of its own
        assert other is not again and again.closed and other.build_workers == 2
    finally:
        sweep_pool(same).close()


def test_a_job_preloads_the_compiler_stack_only_where_it_uses_it():
    """A job that times torch.compile, or writes Triton, wants dynamo, inductor and Triton imported before its
    workers fork; any other starts them light, in a pool of its own within a sweep."""
    from types import SimpleNamespace

    from kforge.apps.synthesize import sweep_pool
    from kforge.job.pipeline import needs_compiler_stack
    assert needs_compiler_stack(True, "cpu") and needs_compiler_stack(False, "triton")
    assert not needs_compiler_stack(False, "cpu") and not needs_compiler_stack(False, "cuda")
    workers = SimpleNamespace(gpus=[], build=1, spare=True)
    full = sweep_pool(workers)
    try:
        light = sweep_pool(workers, light=True)
        assert light is not full and full.closed and light.light and not full.light
        assert sweep_pool(workers, light=True) is light
    finally:
        sweep_pool(workers, light=True).close()


def test_model_litellm_without_its_name_says_what_to_set(tmp_path):
    """It printed OmegaConf's "MissingMandatoryValue while resolving interpolation: Missing mandatory value:
    model.name"."""
    import os
    import subprocess
    import sys
    res = subprocess.run([sys.executable, "-m", "kforge.apps.synthesize", "model=litellm", "backend=cpu"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300,
                         env=dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True"))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr[-2000:]
    assert lines[0].startswith("kforge: model.name is not set") and "set model.name=PROVIDER/MODEL" in lines[0]
    assert "Mandatory" not in res.stderr and list(tmp_path.iterdir()) == []  # refused: no outputs/ left


def test_a_new_key_under_a_mapping_needs_no_plus(tmp_path):
    """``model.extra.top_p=0.9`` or ``model.extra={...}`` failed with Hydra's multi-line "Key 'top_p' is not in
    struct" and exit 1; only ``+model.extra.top_p=0.9`` worked."""
    import os
    import subprocess
    import sys

    import yaml

    from kforge.job.config import free_mapping_overrides
    argv = ["model.extra.top_p=0.9", "model.extra={seed: 7}", "+model.extra.n=1", "model.cache=false", "-m"]
    assert free_mapping_overrides(argv) == ["++model.extra.top_p=0.9", "++model.extra={seed: 7}", "+model.extra.n=1",
                                            "model.cache=false", "-m"]
    res = subprocess.run([sys.executable, "-m", "kforge.apps.synthesize", "model=oracle", "model.extra.top_p=0.9",
                          "model.extra={seed: 7}", "backend.options.threads=2", "--cfg", "job"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300,
                         env=dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True"))
    assert res.returncode == 0, res.stderr[-2000:]
    cfg = yaml.safe_load(res.stdout)
    assert cfg["model"]["extra"] == {"top_p": 0.9, "seed": 7} and cfg["backend"]["options"] == {"threads": 2}
