"""Shared fixtures: one worker pool and one build cache per test session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Two xdist workers, the background builder and the verifiers' children share CI's two cores, each process with
# OpenMP threads of its own. libgomp's threads spin between parallel regions by default and then hold a core
# the other processes need: two processes of four CPU verifications each took 53 s spinning, 34 s waiting passively.
# Set before torch (and so libgomp) loads here; the children inherit it. Tests check behaviour, not speed.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from kforge import REPO_DIR  # noqa: E402
from kforge.sandbox.gpus import detect_gpus
from kforge.verify import WorkerPool

#: The C++ sources the suite verifies on the CPU, roughly in the order the tests first reach them.
CPU_SOURCES = ("kforge/problems/builtin/solutions/cpu/**/*.py", "tests/candidates/cpu/*.py", "tests/exploits/cpu/*.py",
               "tests/idioms/cpu/*.py", "prompts/examples/cpu/**/model_new.py")


def pytest_collection_modifyitems(config, items):
    if detect_gpus():
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU visible (run on a GPU machine: make test-gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    # KFORGE_TEST_CACHE keeps builds (and the ~800 MB precompiled header) between local runs. Under pytest-xdist
    # (`make test` runs two workers) the workers share one: builds are locked per source, so each is built once,
    # by whichever worker (or the background builder) reaches it first.
    if os.environ.get("KFORGE_TEST_CACHE"):
        path = Path(os.environ["KFORGE_TEST_CACHE"])
    elif os.environ.get("PYTEST_XDIST_WORKER"):
        path = tmp_path_factory.getbasetemp().parent / "kforge-cache"
    else:
        path = tmp_path_factory.mktemp("kforge-cache")
    path.mkdir(parents=True, exist_ok=True)
    os.environ["KFORGE_CACHE_DIR"] = str(path)
    builder = _prebuild(path)
    yield path
    if builder is not None:
        builder.kill()
        builder.wait()
        (path / f".prebuild-{os.environ.get('PYTEST_XDIST_TESTRUNUID')}").unlink(missing_ok=True)


def _prebuild(cache: Path) -> subprocess.Popen | None:
    """Build the suite's CPU sources into the session's cache in the background, one at a time at a lower
    priority: a fresh cache (CI's) otherwise builds each where a test first meets it, one core idle meanwhile.
    The background starts from the sources the tests reach last, so the two build different sources until they
    meet (the builder's locks make one wait for the other there, never build twice).
    KFORGE_TEST_PREBUILD=0 turns it off; suites a test starts inherit that."""
    if os.environ.get("KFORGE_TEST_PREBUILD") == "0":
        return None
    os.environ["KFORGE_TEST_PREBUILD"] = "0"
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # one builder per run: its first xdist worker here starts it
    if run:
        try:
            (cache / f".prebuild-{run}").touch(exist_ok=False)
        except FileExistsError:
            return None
    files = [str(p) for pattern in CPU_SOURCES for p in sorted(REPO_DIR.glob(pattern))][::-1]
    if not files:  # an installed kforge without its checkout's tests
        return None
    return subprocess.Popen([sys.executable, "-m", "kforge.cli", "build", *files, "--backend", "cpu", "--jobs", "1"],
                            cwd=REPO_DIR, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=lambda: os.nice(10))


@pytest.fixture(scope="session")
def pool(cache_dir):
    with WorkerPool() as p:  # builds go to $KFORGE_CACHE_DIR/ext
        yield p
