"""Every command takes a tracking store the same way (`kforge.tracking.store.tracking_uri`): a path ending in .db is
a SQLite store, and a plain folder or path (MLflow's file store, which it no longer opens) is refused in one line,
exit 2, before any work: it was MLflow's "filesystem tracking backend is in maintenance mode" traceback."""

import os
import subprocess
import sys

import pytest

from kforge.cli import main
from kforge.errors import ConfigError
from kforge.job.config import TablesConfig, TrackingConfig
from kforge.job.reference import ReferenceConfig
from kforge.tracking.store import default_uri, tracking_uri

ADVICE = "use sqlite:///PATH/mlflow.db"


def test_a_db_path_is_sqlite_and_a_folder_or_plain_path_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert tracking_uri(None) == tracking_uri("") == default_uri()
    assert tracking_uri("runs/mlflow2.db") == f"sqlite:///{tmp_path / 'runs' / 'mlflow2.db'}"
    assert tracking_uri("http://host:5000") == "http://host:5000"
    (tmp_path / "folder").mkdir()
    for plain in ("folder", str(tmp_path / "folder"), "mlruns", f"file://{tmp_path / 'folder'}"):
        with pytest.raises(ConfigError, match="plain path or folder") as exc:
            tracking_uri(plain)
        assert ADVICE in str(exc.value) and "\n" not in str(exc.value)
    assert not (tmp_path / "runs").exists()  # taking the name opens nothing


def test_the_configs_take_the_store_as_the_commands_do(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert TrackingConfig.from_dict({"uri": "m.db"}).uri == f"sqlite:///{tmp_path / 'm.db'}"
    assert TablesConfig.from_dict({"tracking_uri": "m.db"}).tracking_uri == f"sqlite:///{tmp_path / 'm.db'}"
    assert TrackingConfig.from_dict({}).uri is None  # the default store, chosen where the job opens it
    for make in (lambda: TrackingConfig.from_dict({"uri": str(tmp_path)}),
                 lambda: TablesConfig.from_dict({"tracking_uri": "folder"}),
                 lambda: ReferenceConfig.from_dict({"kind": "mlflow", "tracking_uri": "folder"})):
        with pytest.raises(ConfigError, match=ADVICE):
            make()


def test_eval_reproduce_and_ui_refuse_a_folder_with_exit_two(tmp_path, capsys):
    from kforge.apps.reproduce import main as reproduce
    (tmp_path / "m.csv").write_text("problem,candidate\nlevel1/1_ReLU,a.py\n")
    assert main(["eval", "--manifest", str(tmp_path / "m.csv"), "--mlflow", str(tmp_path)]) == 2
    assert main(["ui", "--store", f"file://{tmp_path}", "--print-only"]) == 2
    assert reproduce(["--models", "oracle", "--backends", "cpu", "--tracking-uri", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count(ADVICE) == 3 and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.csv"]  # no rows, no store, no outputs/


@pytest.mark.parametrize("argv", [["kforge.apps.synthesize", "model=oracle", "backend=cpu", "tracking.uri=folder"],
                                  ["kforge.apps.tables", "tracking_uri=folder"]])
def test_the_hydra_commands_refuse_a_folder_in_one_line(tmp_path, argv):
    (tmp_path / "folder").mkdir()
    res = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                         env=dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True"))
    assert res.returncode == 2 and ADVICE in res.stderr and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder"] and not any((tmp_path / "folder").iterdir())
