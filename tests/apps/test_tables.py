"""``kforge-tables`` logs each ablation's files to one run per experiment, updated by every later call."""

from pathlib import Path

from kforge.apps.tables import log_tables
from kforge.tracking import Tracker


def test_tables_are_one_run_per_ablation_updated_in_place(tmp_path: Path):
    tracker = Tracker(f"sqlite:///{tmp_path}/mlflow.db", "single_vs_iterative")
    table = tmp_path / "single_vs_iterative.md"
    table.write_text("| first |\n")
    first = log_tables(tracker.client, "single_vs_iterative", "single_vs_iterative", [table])
    table.write_text("| second |\n")
    again = log_tables(tracker.client, "single_vs_iterative", "single_vs_iterative", [table])
    runs = tracker.client.search_runs([tracker.experiment_id])
    assert first == again and [r.info.run_name for r in runs] == ["tables-single_vs_iterative"]
    assert runs[0].info.status == "FINISHED"
    got = tracker.client.download_artifacts(first, "tables/single_vs_iterative.md", str(tmp_path / "dl"))
    assert Path(got).read_text() == "| second |\n"


def test_tables_from_a_store_that_is_not_there_are_refused_and_make_none(tmp_path: Path):
    """A misspelt store path was made an empty store, and the tables said "no finished runs"."""
    import os
    import subprocess
    import sys
    missing = tmp_path / "nonexist.db"
    res = subprocess.run([sys.executable, "-m", "kforge.apps.tables", f"tracking_uri=sqlite:///{missing}"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300,
                         env=dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True"))
    assert res.returncode == 2 and f"no MLflow store at {missing}" in res.stderr, res.stderr[-2000:]
    assert not missing.exists()


def test_tables_help_names_its_own_keys_not_the_synthesize_groups(tmp_path: Path):
    """Hydra's default help listed kforge-synthesize's configuration groups, none of which kforge-tables reads."""
    import subprocess
    import sys
    res = subprocess.run([sys.executable, "-m", "kforge.apps.tables", "--help"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "tracking_uri   the MLflow store to read" in res.stdout and "baseline: eager" in res.stdout, res.stdout
    assert "Configuration groups" not in res.stdout and "backend:" not in res.stdout, res.stdout
    assert not (tmp_path / "outputs").exists()


def test_an_out_dir_that_is_a_file_is_refused_before_any_work(tmp_path: Path, monkeypatch, capsys):
    """`kforge-tables out_dir=notes.txt` ended in a FileExistsError traceback, and `kforge-reproduce --out notes.txt`
    in one after every sweep had run."""
    import os
    import subprocess
    import sys

    import pytest

    from kforge.apps.reproduce import main as reproduce
    from kforge.errors import ConfigError
    from kforge.job.config import TablesConfig
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    for out, said in ((notes, "is a file"), (notes / "results", f"is under {notes}, a file")):
        with pytest.raises(ConfigError, match=said):
            TablesConfig.from_dict({"out_dir": str(out)})
    assert TablesConfig.from_dict({"out_dir": str(tmp_path / "new" / "results")}).out_dir  # made when written
    res = subprocess.run([sys.executable, "-m", "kforge.apps.tables", "out_dir=notes.txt"], capture_output=True,
                         text=True, cwd=tmp_path, timeout=300, env=dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True"))
    assert res.returncode == 2 and "out_dir notes.txt: is a file" in res.stderr, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    monkeypatch.chdir(tmp_path)
    assert reproduce(["--models", "oracle", "--backends", "cpu", "--levels", "1", "--out", "notes.txt"]) == 2
    assert "--out notes.txt: is a file" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"] and notes.read_text() == "mine\n"
