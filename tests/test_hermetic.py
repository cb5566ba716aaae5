"""The suite judges kforge, not the checkout it runs in: `make test` passes after `make demo` and `make reproduce`
left their store, tables and Hydra folders there, and the README's examples left theirs.

A copy of the checkout is given those leftovers, and the tests that once asserted on them run there; and no
test names the checkout's own state at all.
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kforge import REPO_DIR

#: What `make demo`, `make reproduce`, Hydra and the README's examples leave in the directory they run in.
LEFTOVERS = ("mlflow.db", "results", "outputs", "multirun", "gens", "tb")
#: The tests that once failed in a checkout where `make demo` had run (they asserted the checkout had no store).
ONCE_TRIPPED = ("tests/test_reproduce.py::test_make_reproduce_with_a_litellm_model_string_names_its_key",
                "tests/test_docs.py")
NAMES_STATE = re.compile(r"REPO_DIR\s*/\s*[\"'](%s)[\"'/]" % "|".join(re.escape(n) for n in LEFTOVERS))


def test_no_test_names_the_checkouts_own_state():
    here = Path(__file__).resolve()
    found = [f"{p.relative_to(REPO_DIR)}:{i}" for p in sorted((REPO_DIR / "tests").rglob("*.py")) if p != here
             for i, line in enumerate(p.read_text().splitlines(), 1) if NAMES_STATE.search(line)]
    assert not found, f"tests that read or assert on the checkout's own files: {found}"


def _copy_of_the_checkout(dest: Path) -> Path:
    files = subprocess.run(["git", "-C", str(REPO_DIR), "ls-files", "-z"], capture_output=True, check=True,
                           timeout=60).stdout.decode().split("\0")
    for name in filter(None, files):
        src = REPO_DIR / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def _leave_what_the_demo_leaves(root: Path) -> None:
    from kforge.tracking import Tracker
    tracker = Tracker(f"sqlite:///{root / 'mlflow.db'}", "kforge-demo")  # a store with a finished run in it
    run = tracker.client.create_run(tracker.experiment_id, run_name="oracle · cpu · iterative · L1")
    tracker.client.log_metric(run.info.run_id, "correctness_rate", 1.0)
    tracker.client.set_terminated(run.info.run_id)
    (root / "results").mkdir()
    (root / "results" / "single_vs_iterative.md").write_text("| Loop | n |\n")
    for hydra in ("outputs/2026-01-01/00-00-00/.hydra", "multirun/2026-01-01/00-00-00/0/.hydra"):
        (root / hydra).mkdir(parents=True)
        (root / hydra / "config.yaml").write_text("resume: true\n")
    (root / "gens").mkdir()
    (root / "gens" / "level_1_problem_1_sample_0_kernel.py").write_text("import torch\n")
    (root / "tb").mkdir()
    (root / "tb" / "workload.json").write_text("{}\n")


@pytest.mark.skipif(shutil.which("git") is None or shutil.which("make") is None or not (REPO_DIR / ".git").exists(),
                    reason="needs a git checkout, git and make")
def test_the_tests_that_once_tripped_pass_in_a_checkout_the_demo_has_run_in(tmp_path):
    clone = _copy_of_the_checkout(tmp_path / "clone")
    _leave_what_the_demo_leaves(clone)
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("MAKEFLAGS", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = str(clone)
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-o", "addopts=",
                          *ONCE_TRIPPED], cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert " passed" in res.stdout and "skipped" not in res.stdout


@pytest.mark.skipif(shutil.which("git") is None or not (REPO_DIR / ".git").exists(), reason="needs a git checkout")
def test_what_the_demo_and_the_readmes_commands_leave_is_ignored_by_git(tmp_path):
    clone = _copy_of_the_checkout(tmp_path / "clone")
    git = ["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "clone"]):
        subprocess.run(git + args, check=True, capture_output=True, timeout=120)
    _leave_what_the_demo_leaves(clone)
    untracked = subprocess.run(git + ["status", "--porcelain", "--untracked-files=all"], capture_output=True,
                               text=True, check=True, timeout=120).stdout
    assert untracked == "", f"left untracked in the checkout:\n{untracked}"
