"""A new SQLite store starts as a copy of an empty one MLflow made once (`kforge.tracking.store.empty_store`)."""

import sqlite3

import pytest

from kforge.tracking import Tracker, open_client
from kforge.tracking.store import empty_store


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def migrations(monkeypatch) -> list[str]:
    """The databases MLflow builds its schema in (through all its migrations) from here on."""
    import mlflow.store.db.utils as db_utils
    made, real = [], db_utils._initialize_tables
    monkeypatch.setattr(db_utils, "_initialize_tables", lambda engine: (made.append(str(engine.url)), real(engine)))
    return made


def tables(db) -> list[str]:
    con = sqlite3.connect(db)
    try:
        return sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'index')"))
    finally:
        con.close()


def test_a_new_store_is_the_schema_mlflow_makes_without_migrating_it_again(tmp_path, cache, monkeypatch, migrations):
    from mlflow.tracking import MlflowClient
    MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'by_mlflow.db'}").search_experiments()  # MLflow's own
    empty_store()
    (tmp_path / "job").mkdir()
    monkeypatch.chdir(tmp_path / "job")
    assert len(migrations) == 2  # MLflow's store, then the empty one kforge keeps
    tracker = Tracker(f"sqlite:///{tmp_path / 'job' / 'mlflow.db'}")
    assert len(migrations) == 2  # copied, not built through MLflow's migrations again
    assert tables(tmp_path / "job" / "mlflow.db") == tables(tmp_path / "by_mlflow.db")
    client = tracker.client
    experiments = {e.name: e for e in client.search_experiments()}
    # MLflow's Default experiment is made where the store is opened, as MLflow itself would make it
    assert sorted(experiments) == ["Default", "kforge"] and experiments["Default"].experiment_id == "0"
    assert experiments["Default"].artifact_location == str(tmp_path / "job" / "mlruns" / "0")
    assert str(cache) not in experiments["kforge"].artifact_location
    run = client.create_run(tracker.experiment_id)
    client.log_metric(run.info.run_id, "speedup", 1.5)
    assert open_client(tracker.uri).get_run(run.info.run_id).data.metrics == {"speedup": 1.5}


def test_a_spoilt_empty_store_leaves_the_store_to_mlflow_and_is_made_again(tmp_path, cache, migrations):
    spoilt = empty_store()
    spoilt.write_bytes(b"not a database")
    client = open_client(f"sqlite:///{tmp_path / 'a.db'}")
    assert migrations[-1].endswith("a.db")  # MLflow made this one itself
    assert [e.name for e in client.search_experiments()] == ["Default"]
    assert not spoilt.exists()
    open_client(f"sqlite:///{tmp_path / 'b.db'}")  # the empty store is made again, then copied
    assert not migrations[-1].endswith("b.db"), migrations
    assert spoilt.is_file() and tables(spoilt) == tables(tmp_path / "a.db") == tables(tmp_path / "b.db")


def test_an_existing_store_is_never_replaced(tmp_path, cache):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri)
    run = tracker.client.create_run(tracker.experiment_id)
    again = open_client(uri)
    assert again.get_run(run.info.run_id).info.run_id == run.info.run_id
    assert [e.name for e in again.search_experiments() if e.name == "kforge"] == ["kforge"]


RACE = """
import sys
import threading

from kforge.tracking import Tracker, open_client

uri = f"sqlite:///{sys.argv[1]}/mlflow.db"
errors = []


def open_tracker():
    try:
        Tracker(uri, "kforge")
    except BaseException as exc:
        errors.append(repr(exc))


t = threading.Thread(target=open_tracker)
t.start()
try:
    open_client(uri).search_experiments()
except BaseException as exc:
    errors.append(repr(exc))
t.join()
print(errors)
sys.exit(1 if errors else 0)
"""


def test_a_tracker_opened_on_a_thread_beside_a_reader_in_a_fresh_process(tmp_path):
    """A job opens its tracker on a thread while the main thread may already read the store (a resumed workload
    looks up its earlier extraction): the first mlflow import of a process, on two threads at once, met mlflow
    partially initialised and the resumed job died. Only a fresh process imports mlflow for the first time."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", RACE, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


def test_a_uri_that_is_no_store_is_refused_before_mlflow_opens_it(tmp_path):
    """A bogus scheme, a folder or a file that is not a database ended in MLflow's traceback, and left a lock file
    beside the user's file."""
    from kforge.errors import ConfigError
    from kforge.tracking.store import open_client, store_problem
    assert "no store for bogus://" in store_problem("bogus://x")
    assert "is a directory" in store_problem(f"sqlite:///{tmp_path}")
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n")
    with pytest.raises(ConfigError, match="is not an SQLite database"):
        open_client(f"sqlite:///{notes}")
    assert not (tmp_path / "notes.txt.lock").exists() and notes.read_text() == "not a database\n"
    for fine in (f"sqlite:///{tmp_path / 'new.db'}", "http://localhost:5000", "postgresql+psycopg2://u@h/db"):
        assert store_problem(fine) is None, fine
    # MLflow's file store (a folder): it refuses to open one, so kforge does, saying what to use instead.
    assert "use sqlite:///PATH/mlflow.db" in store_problem(str(tmp_path / "runs"))
