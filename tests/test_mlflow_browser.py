"""The MLflow view in a real headless Chromium (scripts/mlflow_view_check.py), where one is installed."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from kforge import REPO_DIR

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/usr/bin/chromium").exists() or importlib.util.find_spec("playwright") is None,
                       reason="needs Debian's chromium and the playwright package"),
]


def test_runs_table_description_and_state_tag_show_in_chromium(tmp_path):
    out = tmp_path / "shots"
    res = subprocess.run([sys.executable, str(REPO_DIR / "scripts" / "mlflow_view_check.py"), "--problems", "1",
                          "--out", str(out)], capture_output=True, text=True, cwd=tmp_path, timeout=880)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-3000:]
    assert "FAIL" not in res.stdout and res.stdout.count("PASS") >= 10
    for shot in ("runs_table", "parent_run", "problem_run", "experiment_link"):
        assert (out / f"{shot}.png").stat().st_size > 10_000
