"""``kforge ui``: serve a job's MLflow store with MLflow's UI and print the addresses that open it.

The addresses are looked up in the store being served (each experiment's id there), so they are right
from any directory and from an installed wheel. Each kforge experiment gets two: its ablation view
(`report.browse`: problems grouped by what its jobs differ in, correctness and speedup first) and its
runs table in kforge's saved view.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

from .common import UsageError


def add_parser(sub) -> None:
    u = sub.add_parser("ui", help="serve a tracking store with MLflow's UI and print each experiment's address",
                       description="Serve the MLflow store a job wrote (default: ./mlflow.db, where a job "
                                   "started in this directory writes) with `mlflow ui`, after printing, for "
                                   "each kforge experiment in it, the address of its runs table and of its "
                                   "ablation view (runs grouped by what the jobs differ in). Ctrl-C stops it.")
    u.add_argument("--store", metavar="URI|PATH",
                   help="a sqlite:/// URI, a .db file, a directory holding mlflow.db, or an http(s) tracking "
                        "server (then nothing is served: its addresses are printed)")
    u.add_argument("--port", type=int, default=5000, help="port to serve on (default 5000)")
    u.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine)")
    u.add_argument("--print-only", action="store_true", help="print the addresses, serve nothing")
    u.set_defaults(func=cmd_ui)


def store_uri(spec: str | None) -> str:
    """The tracking URI ``--store`` names (``./mlflow.db`` by default); a missing SQLite file is a usage error."""
    from ..tracking.store import sqlite_path, tracking_uri
    if spec and spec.startswith(("http://", "https://")):
        return spec.rstrip("/")
    if spec and "://" not in spec:  # reading: a job's folder or its store file, whatever the file's name
        path = Path(spec).expanduser()
        path = path / "mlflow.db" if path.is_dir() else path
        spec = f"sqlite:///{path.resolve()}"
    uri = tracking_uri(spec)  # what every command takes: another scheme or a spoilt file refused in one line
    db = sqlite_path(uri)
    if db is not None and not db.is_file():
        raise UsageError(f"no MLflow store at {db}: run a job first (kforge-synthesize ...), or name the store "
                         "the job wrote with --store (its path or URI: the job's first line says it)")
    return uri


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def cmd_ui(args: argparse.Namespace) -> int:
    uri = store_uri(args.store)
    served = not uri.startswith("http")
    base = f"http://{args.host}:{args.port}" if served else uri
    if served and not args.print_only and not _port_free(args.host, args.port):
        raise UsageError(f"port {args.port} is in use (another `kforge ui` or `mlflow ui`?): choose another with "
                         "--port")
    from ..report.browse import addresses
    from ..tracking import open_client
    found = addresses(open_client(uri), base)
    print(f"kforge ui: {uri}")
    for a in found:
        print(f"  {a.experiment}\n    by {a.factor or 'level'} (correctness, speedup): {a.ablation}\n"
              f"    runs table: {a.runs}")
    if not found:
        print("  no kforge experiment in this store yet: run a job first (kforge-synthesize model=oracle ...)")
    if not served or args.print_only:
        return 0
    print(f"serving with `mlflow ui` on {base} (Ctrl-C stops it)", flush=True)
    # One server process: a person browsing a local store needs no more, and MLflow's default four each import
    # its whole server at start (seconds of CPU apiece before the first page, on a small machine).
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", args.host,
           "--port", str(args.port), "--workers", "1"]
    # MLflow's server takes this process's place: Ctrl-C and a SIGTERM reach it, and nothing outlives it.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # its server imports litellm: no price download
    sys.stdout.flush()
    os.execv(sys.executable, cmd)
    return 0  # not reached
