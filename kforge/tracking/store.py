"""Opening an MLflow store: a client that survives several jobs writing one SQLite file at once."""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
import time
import uuid
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


_MLFLOW_IMPORT = threading.Lock()


def import_mlflow():
    """The mlflow package, imported whole under one lock. A job opens its tracker on a thread of its own while the
    main thread may read the store already (a workload's earlier extraction, when the job resumes); two threads
    importing mlflow at once met it partially initialised (``cannot import name '_get_store' from partially
    initialized module 'mlflow.tracking'``), and the resumed job died."""
    with _MLFLOW_IMPORT:
        import mlflow
        import mlflow.tracking  # noqa: F401 - the part both threads need, whole before either uses it
    return mlflow


#: Schemes MLflow opens a tracking store for. Not "" or file://: its file store (a folder, ./mlruns) is in
#: maintenance mode and refuses to open, a traceback after the work was set up.
_SCHEMES = ("sqlite", "http", "https", "databricks", "databricks-uc", "uc", "postgresql", "postgres", "mysql", "mssql")
_USE = "use sqlite:///PATH/mlflow.db (a path ending in .db is taken as one) or http(s)://HOST for a tracking server"


def store_problem(uri: str) -> str | None:
    """Why ``uri`` is no MLflow store to open (None: it may be one): a plain path or folder (MLflow's file store), a
    scheme MLflow has none for, or a SQLite URI naming a folder or a file that is not a database (opened, MLflow's
    traceback; and a lock file left beside it)."""
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme in ("", "file"):
        return f"tracking URI {uri!r}: a plain path or folder is MLflow's file store, which it no longer opens; {_USE}"
    if scheme.split("+", 1)[0] not in _SCHEMES:
        return f"tracking URI {uri!r}: MLflow has no store for {scheme}:// ({_USE})"
    db = sqlite_path(uri)
    if db is not None and db.is_dir():
        return f"tracking URI {uri!r}: {db} is a directory; name the SQLite file (sqlite:///{db}/mlflow.db)"
    if db is not None and db.is_file() and db.stat().st_size:
        with open(db, "rb") as fh:
            if fh.read(16) != b"SQLite format 3\x00":
                return f"tracking URI {uri!r}: {db} is not an SQLite database, so not an MLflow store"
    return None


def tracking_uri(spec: str | None) -> str:
    """The store a setting or an option names, as the URI to open; every command that opens one goes through here.

    None or empty: `default_uri`; a plain path ending in ``.db``: ``sqlite:///`` its absolute path (as ``kforge ui
    --store x.db`` takes it); a URI as given. Raises `ConfigError` (one line, `store_problem`'s) for anything else,
    a plain folder or path included, before anything is set up."""
    from ..errors import ConfigError
    spec = (spec or "").strip()
    if not spec:
        return default_uri()
    if "://" not in spec and Path(spec).suffix.lower() == ".db":
        spec = f"sqlite:///{Path(spec).expanduser().resolve()}"
    if problem := store_problem(spec):
        raise ConfigError(problem)
    return spec


def open_client(uri: str | None):
    """An MlflowClient for ``uri`` (as `tracking_uri` takes it) that retries while a SQLite store is locked.

    A new SQLite store gets its tables on its first touch; two processes touching it at once (jobs
    started together, or a reader such as `make tables` beside a starting sweep) race in that schema
    migration and one dies. A lock file next to the database serialises the first touch, which copies an
    empty store MLflow made earlier (`empty_store`) rather than migrating the schema again.
    """
    uri = tracking_uri(uri)
    import_mlflow()
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
        if not db.exists() or db.stat().st_size == 0:
            _seed(db)
        # MLflow creates and migrates the tables when it makes the client's store, or at its first call.
        client = _Retrying(MlflowClient(tracking_uri=uri))
        client.get_experiment_by_name("Default")
    return client


def _seed(db: Path) -> None:
    """Start a new SQLite store as a copy of `empty_store`: MLflow's own first touch builds its schema from
    the first version through every migration since, about 4 s of one core (as long as importing MLflow), and
    a job, a test or `kforge eval` into a new directory pays it each time. Anything amiss with the copy leaves
    the store to MLflow, as before."""
    tmp = db.with_name(f".{db.name}.{os.getpid()}.seed")
    try:
        template = empty_store()
        if _schema_version(template) is None:  # spoilt since it was made: made again next time
            template.unlink(missing_ok=True)
            return
        shutil.copyfile(template, tmp)
        os.replace(tmp, db)
    except Exception:  # noqa: BLE001 - an optimisation only: MLflow makes the store itself
        return
    finally:
        tmp.unlink(missing_ok=True)


def _schema_version(db: Path) -> str | None:
    """The alembic revision a SQLite file's MLflow schema is at; None if it is no such store."""
    try:
        con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)  # as_uri escapes '?' and '#'
        try:
            row = con.execute("SELECT version_num FROM alembic_version").fetchone()
        finally:
            con.close()
    except sqlite3.Error:
        return None
    return row[0] if row else None


def empty_store() -> Path:
    """A SQLite store MLflow has created and migrated, less the one row it then adds (its ``Default``
    experiment, whose artifact location is the directory it was made in; MLflow adds that row again, for
    wherever a copy is opened). Made once per MLflow, SQLAlchemy and alembic version, in kforge's cache."""
    import alembic
    import mlflow
    import sqlalchemy
    from mlflow.tracking import MlflowClient

    from .. import cache_dir
    from ..cachefile import locked
    folder = cache_dir() / "mlflow-stores"
    path = folder / f"mlflow-{mlflow.__version__}-sqlalchemy-{sqlalchemy.__version__}-alembic-{alembic.__version__}.db"
    if path.is_file():
        return path
    with locked(path.with_suffix(".lock")):
        if path.is_file():
            return path
        # A name never used before: MLflow keeps each store it opened by its URI for the process's life.
        tmp = path.with_name(f"{path.stem}.{uuid.uuid4().hex}.tmp")
        try:
            MlflowClient(tracking_uri=f"sqlite:///{tmp}").get_experiment_by_name("Default")
            con = sqlite3.connect(tmp)
            try:
                with con:
                    con.execute("DELETE FROM experiments")
                left = con.execute("SELECT COUNT(*) FROM experiments").fetchone()[0]
            finally:
                con.close()
            if left or _schema_version(tmp) is None:
                raise RuntimeError(f"MLflow's new store at {tmp} is not as expected")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return path
