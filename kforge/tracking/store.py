"""Opening an MLflow store: a client that survives several jobs writing one SQLite file at once."""

from __future__ import annotations

import os
import time
from pathlib import Path


class _Retrying:
    """An MlflowClient whose calls retry while SQLite says the database is locked.

    Several jobs (joblib, several launchers on one machine) may write one SQLite store at once; SQLite
    serialises writers and the loser gets "database is locked" after its busy timeout. Retrying
    loses nothing. A server backend never says this.
    """

    def __init__(self, client):
        self._client = client

    def __getattr__(self, name):
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            delay = 0.05
            for attempt in range(12):
                try:
                    return attr(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - MLflow wraps SQLAlchemy's OperationalError
                    if "database is locked" not in str(exc) or attempt == 11:
                        raise
                    time.sleep(delay)
                    delay = min(2.0, delay * 2)
        return call


def default_uri() -> str:
    """A SQLite file in the working directory (MLflow's embedded mode)."""
    return f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def sqlite_path(uri: str) -> Path | None:
    return Path(uri[len("sqlite:///"):]).resolve() if uri.startswith("sqlite:///") else None


def open_client(uri: str):
    """An MlflowClient for ``uri`` that retries while a SQLite store is locked.

    A new SQLite store gets its tables on its first touch; two processes touching it at once (jobs
    started together, or a reader such as `make tables` beside a starting sweep) race in that schema
    migration and one dies. A lock file next to the database serialises the first touch.
    """
    from mlflow.tracking import MlflowClient
    # MLflow draws a "Downloading artifacts" bar per download; resume and reference transfer download a
    # few small files per problem, hundreds of bars for nothing. An explicit setting is kept.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    db = sqlite_path(uri)
    if db is None:
        return _Retrying(MlflowClient(tracking_uri=uri))
    import fcntl
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(str(db) + ".lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        # MLflow creates and migrates the tables when it makes the client's store, or at its first call.
        client = _Retrying(MlflowClient(tracking_uri=uri))
        client.get_experiment_by_name("Default")
    return client
