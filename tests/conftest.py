"""Shared fixtures: one worker pool and one build cache per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kforge.sandbox.gpus import detect_gpus
from kforge.verify import WorkerPool


def pytest_collection_modifyitems(config, items):
    if detect_gpus():
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU visible (run on a GPU machine: make test-gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    # KFORGE_TEST_CACHE keeps builds (and the ~800 MB precompiled header) between local runs.
    path = Path(os.environ.get("KFORGE_TEST_CACHE") or tmp_path_factory.mktemp("kforge-cache"))
    path.mkdir(parents=True, exist_ok=True)
    os.environ["KFORGE_CACHE_DIR"] = str(path)
    return path


@pytest.fixture(scope="session")
def pool(cache_dir):
    with WorkerPool() as p:  # builds go to $KFORGE_CACHE_DIR/ext
        yield p
