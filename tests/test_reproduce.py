"""make reproduce: the model check, an oracle dry run of one sweep at tiny size, and missing references."""

import os
import signal
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from mlflow.tracking import MlflowClient

from kforge import REPO_DIR
from kforge.job.pipeline import run
from tests.helpers import FAST

TINY = [o for o in FAST if not o.startswith("problems.names")]


def test_missing_key_stops_at_once_and_suggests_the_oracle(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    res = subprocess.run([sys.executable, str(REPO_DIR / "pipelines" / "reproduce.py"), "--models", "gpt-5"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert res.returncode != 0 and "OPENAI_API_KEY" in res.stderr and "MODELS=oracle" in res.stderr
    assert not (tmp_path / "mlflow.db").exists()
    # no iterations: refused before the oracle's kernels are built (it built twelve, then a sweep failed)
    res = subprocess.run([sys.executable, str(REPO_DIR / "pipelines" / "reproduce.py"), "--models", "oracle",
                          "--backends", "cpu", "--iterations", "0"], capture_output=True, text=True, cwd=tmp_path,
                         timeout=300)
    assert res.returncode == 2 and "--iterations 0: at least one iteration" in res.stderr, res.stderr[-2000:]


def test_make_reproduce_with_a_litellm_model_string_names_its_key(tmp_path):
    # Any litellm model string: litellm says which variable its provider reads.
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "MAKEFLAGS")}
    # The checkout's Makefile, started elsewhere: the checkout's own store (`make demo` writes one) is not looked at.
    res = subprocess.run(["make", "-s", "-f", str(REPO_DIR / "Makefile"), "reproduce", "MODELS=openai/gpt-5",
                          f"PYTHON={sys.executable}"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert res.returncode != 0 and "needs OPENAI_API_KEY" in res.stderr, res.stderr[-2000:]
    assert "unknown model" not in res.stderr and list(tmp_path.iterdir()) == []  # stopped before any store


def oracle_dry_run(tmp_path, ablation: str) -> str:
    """`make reproduce` of one ablation with the oracle on one tiny problem; its Markdown table."""
    cmd = [sys.executable, str(REPO_DIR / "pipelines" / "reproduce.py"), "--models", "oracle", "--backends", "cpu",
           "--levels", "1", "--iterations", "2", "--ablations", ablation, "--", "problems.names=[level1/1_ReLU]", *TINY]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return (tmp_path / "results" / f"{ablation}.md").read_text()


def test_oracle_dry_run_of_one_sweep_writes_tables(tmp_path):
    table = oracle_dry_run(tmp_path, "single_vs_iterative")
    assert "| Iterative | 1/1 [100–100%] |" in table and "| Single shot | 1/1 [100–100%] |" in table
    # One oracle kernel timed in both arms (three timings): the caption says how much its timings varied.
    assert "oracle† on cpu at FP32, level 1, n = 1" in table and "† Not an LLM: kforge's hand-written solutions" in table
    assert "(1 kernel timed repeatedly varied by a median of" in table
    assert (tmp_path / "results" / "single_vs_iterative_fast_p.png").is_file()
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("kforge-single_vs_iterative")
    kinds = [r.data.tags.get("kforge.kind") for r in client.search_runs([exp.experiment_id])]
    assert kinds.count("sweep-job") == 2 and kinds.count("problem") == 2 and kinds.count("tables") == 1


def test_sigterm_stops_the_running_sweep_and_ends_quietly(tmp_path):
    """A scheduler's SIGTERM to kforge-reproduce reaches the sweep it runs, which closes its job as after Ctrl-C;
    kforge-reproduce reads its lines to the end (dying first left it writing into a closed pipe: a
    BrokenPipeError traceback) and says how to continue, with no later sweep started."""
    cmd = [sys.executable, str(REPO_DIR / "pipelines" / "reproduce.py"), "--models", "oracle", "--backends", "cpu",
           "--levels", "1", "--iterations", "2", "--ablations", "single_vs_iterative,iterative_vs_beam", "--",
           "problems.names=[level1/1_ReLU,level1/2_Softmax]", "model.latency_s=1.0", *TINY]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines = []
    for line in proc.stdout:  # the sweep's first iteration line: a job is under way
        lines.append(line)
        if "iter_000" in line:
            os.kill(proc.pid, signal.SIGTERM)
            break
    lines += proc.stdout.readlines()
    out = "".join(lines)
    assert proc.wait(timeout=300) == 128 + signal.SIGTERM, out[-3000:]
    assert "Traceback" not in out and "BrokenPipe" not in out and "Logging error" not in out, out[-3000:]
    assert "kforge: interrupted;" in out and "stopped by SIGTERM in the single_vs_iterative sweep" in out
    assert "=== iterative_vs_beam" not in out and not (tmp_path / "results").exists()


def test_problem_without_reference_is_tagged_not_fatal(tmp_path, pool):
    kb = tmp_path / "kb" / "level1"
    kb.mkdir(parents=True)
    (kb / "1_Relu.py").write_text((REPO_DIR / "kforge/problems/builtin/level1/1_ReLU.py").read_text())
    with initialize_config_dir(config_dir=str(REPO_DIR / "conf"), version_base="1.3"):
        cfg = compose("synthesize", overrides=[f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", *TINY,
                                               "problems=kernelbench_l1", f"problems.root={tmp_path / 'kb'}",
                                               "reference=oracle", "loop=single_shot", "verify.require_kernel=false"])
    result = run(cfg, pool=pool)
    assert len(result.results) == 1  # ran (the oracle model has no answer for a non-built-in problem)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("kforge").experiment_id])
    problem = next(r for r in runs if r.data.tags.get("kforge.kind") == "problem")
    parent = next(r for r in runs if r.data.tags.get("kforge.kind") == "sweep-job")
    assert problem.data.tags["reference_available"] == "false" and problem.data.tags["reference"] == "oracle:cuda"
    assert parent.data.tags["references_available"] == "0/1"


def test_the_fourth_ablation_compares_the_chain_and_beam_search(tmp_path):
    """`make reproduce`'s iterative_vs_beam sweep runs both searches and tables them by loop mode."""
    from kforge.report.tables import ABLATIONS
    assert "iterative_vs_beam" in ABLATIONS
    table = oracle_dry_run(tmp_path, "iterative_vs_beam")
    assert "| Beam search | 1/1 [100–100%] |" in table and "| Iterative | 1/1 [100–100%] |" in table
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("kforge-iterative_vs_beam")
    problems = client.search_runs([exp.experiment_id], "tags.`kforge.kind` = 'problem'")
    assert sorted(r.data.tags["loop_mode"] for r in problems) == ["beam", "iterative"]


def test_the_reference_transfer_matrix_runs_offline_on_cpu_opencl_and_the_triton_interpreter(tmp_path):
    """Every (source, target) pair of cpu, opencl and triton (Triton's interpreter here), each target also without
    a reference, single shot with the oracle on one tiny problem; kforge-tables writes the matrix."""
    pytest.importorskip("pyopencl")
    pytest.importorskip("triton")
    backends = "cpu,opencl,triton"
    cmd = [sys.executable, str(REPO_DIR / "pipelines" / "reproduce.py"), "--models", "oracle", "--backends", backends,
           "--sources", backends, "--levels", "1", "--ablations", "reference_transfer", "--",
           "problems.names=[level1/1_ReLU]", *TINY, "verify.timing.max_trials=3"]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=1200)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    matrix = (tmp_path / "results" / "reference_transfer_matrix.md").read_text()
    for source in ("cpu", "opencl", "triton"):
        cells = [c.strip() for c in next(line for line in matrix.splitlines() if line.startswith(f"| {source} |"))
                 .split("|")[2:-1]]
        assert cells.count("—") == 1 and all(c == "1/1 (1/1 without)" for c in cells if c != "—"), matrix
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("kforge-reference_transfer")
    problems = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("kforge.kind") == "problem"]
    refs = sorted((r.data.tags["backend"], r.data.tags["reference"]) for r in problems)
    assert refs == sorted([(t, "none") for t in backends.split(",")] +
                          [(t, f"oracle:{s}") for t in backends.split(",") for s in backends.split(",") if s != t])
    assert all(r.data.tags["reference_available"] == "true" for r in problems if r.data.tags["reference"] != "none")


def test_the_backward_ablation_tables_the_forward_against_a_training_step(tmp_path):
    """`make reproduce`'s backward_ablation runs the oracle offline in both passes and tables them by `pass`."""
    table = oracle_dry_run(tmp_path, "backward_ablation")
    assert "| Forward only | 1/1 [100–100%] |" in table and "| Training step | 1/1 [100–100%] |" in table, table
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("kforge-backward_ablation")
    jobs = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("kforge.kind") == "sweep-job"]
    assert sorted(r.data.params["pass"] for r in jobs) == ["forward", "training"]


def test_the_precision_ablation_tables_fp32_against_bf16(tmp_path):
    """`make reproduce`'s precision_ablation runs the oracle offline in fp32 and bf16 and tables them by precision;
    MLflow's runs carry the factor as a parameter."""
    table = oracle_dry_run(tmp_path, "precision_ablation")
    assert "| FP32 | 1/1 [100–100%] |" in table and "| BF16 | 1/1 [100–100%] |" in table, table
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("kforge-precision_ablation")
    jobs = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("kforge.kind") == "sweep-job"]
    assert sorted(r.data.params["precision"] for r in jobs) == ["bf16", "fp32"]


def test_quick_keeps_its_settings_beside_reproduce_args_from_the_command_line():
    """``make reproduce QUICK=1 REPRODUCE_ARGS=precision=bf16``: a command-line variable replaces the Makefile's
    ``+=``, and QUICK's short timing budget and skipped compile baseline were lost without a word."""
    out = subprocess.run(["make", "-n", "-C", str(REPO_DIR), "reproduce", "MODELS=oracle", "QUICK=1",
                          "REPRODUCE_ARGS=precision=bf16", "PYTHON=python3"], capture_output=True, text=True).stdout
    assert "-- verify.compile_ref=false verify.timing.budget_s=1 precision=bf16" in out, out
