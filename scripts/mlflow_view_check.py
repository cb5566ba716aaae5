"""Look at kforge's MLflow views as a person would: a real headless Chromium against `kforge ui`.

    python scripts/mlflow_view_check.py                       # a fresh sweep store (oracle, single vs iterative)
    python scripts/mlflow_view_check.py --store DIR           # DIR/mlflow.db (made there first if missing)
    python scripts/mlflow_view_check.py --out shots --problems 2

Needs Chromium (Debian: `apt-get install chromium`; `make setup` installs it where it can) and
Playwright's Python package (in kforge's dev extras; its own browser download is not used). It makes a
single-vs-iterative sweep of the oracle on cpu, serves it with `kforge ui` on a free local port, opens
the addresses that prints in a 1600x900 window, then checks and screenshots, under --out:
  ablation.png          the first address (`kforge ui`'s "by loop_mode"): the ablation's factor, the arms' figures
                        (correctness rate, fast_1, geomean speedup) and both arms' rows, all without scrolling,
                        no figure with float noise
  runs_table.png        the runs-table address: every problem's row with its state and speedup, the jobs'
                        summary metrics
  parent_run.png        a sweep job's run, clicked in that table: its description, the table of problems
  problem_run.png       a problem's run, clicked there: the state tag beside the metrics
  experiment_link.png   the experiment's plain address, as a link from MLflow's experiment list gives it
                        (where it lands depends on the MLflow version: reported, not checked)
MLflow's assistant panel, which MLflow 3.17 opens once on a browser's first visit to a localhost address (MLflow
has no setting to switch it off), is closed first, as a person would.
Exit status 0 when every check passed; each check is printed.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
EXPERIMENT = "kforge-single_vs_iterative"
VIEWPORT = {"width": 1600, "height": 900}
#: The test suite's quick verification settings (tests/helpers.py's FAST): small inputs, few timed calls.
QUICK = ["problems.overrides={BATCH:8,DIM:4096}", "verify.trials=2", "verify.compile_ref=false",
         "verify.timing.min_trials=3", "verify.timing.max_trials=6", "verify.timing.budget_s=1",
         "verify.timing.warmup=1"]


def make_store(where: Path, problems: int) -> None:
    """The single-vs-iterative ablation on the first ``problems`` level-1 problems: oracle, cpu, 2 iterations."""
    cmd = [sys.executable, str(REPO / "pipelines" / "synthesize.py"), "experiment=single_vs_iterative",
           "hydra.sweeper.params.problems=builtin_l1", f"problems.ids=1-{problems}", "loop.iterations=2", *QUICK,
           f"tracking.uri=sqlite:///{where / 'mlflow.db'}", f"hydra.sweep.dir={where / 'outputs'}"]
    print("making a store:", " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, check=True, cwd=where)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(db: Path, port: int, log: Path) -> tuple[subprocess.Popen, list[str]]:
    """`kforge ui` on the store, as a person starts it; the server and the addresses it printed."""
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true", DO_NOT_TRACK="true", LITELLM_LOCAL_MODEL_COST_MAP="True")
    proc = subprocess.Popen([sys.executable, "-m", "kforge.cli", "ui", "--store", str(db), "--port", str(port)],
                            stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"kforge ui exited ({proc.returncode}); see {log}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return proc, [w for line in log.read_text().splitlines() for w in line.split() if "#/experiments/" in w]
        except OSError:
            time.sleep(1)
    stop(proc)
    raise SystemExit(f"kforge ui did not answer in 180 s; see {log}")


def stop(server: subprocess.Popen) -> None:
    """mlflow ui's workers can take long over SIGTERM: then they are killed."""
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


class Checks:
    def __init__(self) -> None:
        self.failed: list[str] = []

    def __call__(self, ok: bool, what: str) -> None:
        print(f"  {'PASS' if ok else 'FAIL'}  {what}", flush=True)
        if not ok:
            self.failed.append(what)


def visible(locator, timeout_ms: int = 60_000) -> bool:
    try:
        locator.first.wait_for(state="visible", timeout=timeout_ms)
        return True
    except Exception:  # noqa: BLE001 - playwright's TimeoutError: not shown
        return False


def close_assistant(page) -> None:
    """MLflow 3.17 opens its assistant panel over a third of the page on a first visit; a person closes it."""
    panel = page.get_by_text("MLflow Assistant")
    if visible(panel, 5_000):
        page.locator("button[aria-label*='lose']").first.click()
        page.wait_for_timeout(500)


def on_screen(page, locator) -> bool:
    """Whether one of the elements is inside the window as it opened: seen without scrolling."""
    size = page.viewport_size
    for i in range(locator.count()):
        box = locator.nth(i).bounding_box()
        if box and box["width"] > 0 and box["x"] >= 0 and box["y"] >= 0 and \
                box["x"] + box["width"] <= size["width"] and box["y"] + box["height"] <= size["height"]:
            return True
    return False


def look_at_ablation(page, address: str, out: Path, check: Checks) -> None:
    """The first address `kforge ui` prints: the arms side by side, factor and outcome columns in view."""
    page.goto(address)
    rows = page.get_by_role("gridcell")
    arms = [arm for arm in ("single_shot", "iterative") if visible(rows.filter(has_text=arm))]
    close_assistant(page)
    page.wait_for_timeout(1500)
    check(arms == ["single_shot", "iterative"], f"both arms of the ablation are rows ({', '.join(arms) or 'none'})")
    check(visible(page.get_by_text("Group by: loop_mode"), 10_000), "the runs are grouped by the ablation's factor")
    heads = page.get_by_role("columnheader")
    for column in ("loop_mode", "arm_correctness_rate", "arm_fast_1", "arm_geomean_speedup_vs_eager",
                   "best_speedup_vs_eager"):
        check(visible(heads.filter(has_text=column), 10_000) and on_screen(page, heads.filter(has_text=column)),
              f"column {column!r} is shown without scrolling ({VIEWPORT['width']}x{VIEWPORT['height']})")
    noisy = [t for t in rows.all_inner_texts() for w in t.split() if w.replace(".", "", 1).isdigit()
             and len(w.replace(".", "").lstrip("0")) > 4]
    check(not noisy, f"every figure shown has at most four significant digits ({noisy[:3] or 'none longer'})")
    check(not visible(rows.filter(has_text="sweep-job"), 2_000), "only the problems' runs are rows (no job rows)")
    page.screenshot(path=str(out / "ablation.png"))


def look(addresses: list[str], out: Path, experiment_id: str, parent_name: str, problem_keys: list[str],
         problem_runs: list[str]) -> Checks:
    """``problem_keys`` (``level1/1_ReLU``) are what the job's description lists; ``problem_runs`` the problems'
    run names (``L1/1_ReLU · iterative``), the rows of the runs table."""
    from playwright.sync_api import sync_playwright

    ablation, table = addresses[0], addresses[1]
    base = table.split("/#/")[0]
    check = Checks()
    with sync_playwright() as pw, tempfile.TemporaryDirectory(prefix="kforge-chromium-") as profile:
        browser = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,  # the profile is a fresh --user-data-dir
            viewport=VIEWPORT)
        page = browser.new_page()
        check(f"#/experiments/{experiment_id}/" in ablation, f"kforge ui's address names experiment {experiment_id}")
        look_at_ablation(page, ablation, out, check)

        page.goto(table)
        rows = page.get_by_role("gridcell")
        shown = [k for k in problem_runs if visible(rows.filter(has_text=k))]
        check("/runs" in page.url, f"kforge's address opens the runs table ({page.url.split('#')[1][:60]}...)")
        check(shown == problem_runs, f"every problem's run is a row without expanding anything ({len(shown)}/"
                                     f"{len(problem_runs)})")
        heads = page.get_by_role("columnheader")
        for column in ("state", "best_speedup_vs_eager", "iterations", "correctness_rate", "geomean_speedup_vs_eager"):
            check(visible(heads.filter(has_text=column), 10_000), f"column {column!r} is shown")
        check(visible(rows.filter(has_text="correct").filter(has_not_text="_"), 10_000),
              "the state reads as a word in its column ('correct')")
        page.wait_for_timeout(1500)
        page.screenshot(path=str(out / "runs_table.png"))

        page.get_by_role("link", name=parent_name).first.click()
        check(visible(page.get_by_text("best speedup vs eager")), "the sweep job's description is its table of problems")
        more = page.get_by_text("Show more")
        if visible(more, 3_000):
            more.first.click()
        cells = page.locator("table td").all_inner_texts()
        check(all(k in cells for k in problem_keys), "the description's table lists every problem")
        page.wait_for_timeout(1000)
        page.screenshot(path=str(out / "parent_run.png"))

        page.goto(table)
        page.get_by_role("link", name=problem_runs[0]).first.click()
        check(visible(page.get_by_text("state_index")) and visible(page.get_by_text("best_speedup_vs_eager")),
              "a problem's run shows its metrics by their new names")
        check(visible(page.get_by_text("state", exact=True), 10_000), "a problem's run shows its state tag")
        page.wait_for_timeout(1000)
        page.screenshot(path=str(out / "problem_run.png"))

        page.goto(f"{base}/#/experiments/{experiment_id}")
        page.wait_for_timeout(5_000)
        tab = page.url.split("#")[1].split("?")[0]
        print(f"  INFO  the experiment's plain link lands on {tab} (MLflow 3.17 picks by its GenAI / Model training "
              "switch, which this fresh browser has at GenAI; kforge's address chooses Model training)")
        page.screenshot(path=str(out / "experiment_link.png"))
        browser.close()
    return check


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, help="a directory with mlflow.db, made there if missing (default: a "
                    "temporary one)")
    ap.add_argument("--out", type=Path, default=Path("mlflow_view_check"), help="where the screenshots go")
    ap.add_argument("--problems", type=int, default=1, help="level-1 problems in a store made here (default 1)")
    args = ap.parse_args(argv)
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"kforge: no Chromium at {CHROMIUM} (Debian: apt-get install chromium)")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kforge-view-") as tmp:
        store = args.store.resolve() if args.store else Path(tmp)
        if not (store / "mlflow.db").exists():
            store.mkdir(parents=True, exist_ok=True)
            make_store(store, args.problems)
        from kforge.tracking import open_client
        client = open_client(f"sqlite:///{store / 'mlflow.db'}")
        exp = client.get_experiment_by_name(EXPERIMENT)
        if exp is None:
            raise SystemExit(f"kforge: no experiment {EXPERIMENT!r} in {store / 'mlflow.db'}")
        runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"])
        parent = next(r for r in runs if r.data.tags.get("kforge.kind") == "sweep-job")
        problems = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
        port = free_port()
        server, addresses = serve(store / "mlflow.db", port, args.out / "kforge_ui.log")
        try:
            check = look(addresses, args.out, exp.experiment_id, parent.info.run_name,
                         sorted({r.data.tags["problem"] for r in problems}), sorted(r.info.run_name for r in problems))
        finally:
            stop(server)
    print(f"screenshots in {args.out}/; {len(check.failed)} check(s) failed" if check.failed
          else f"screenshots in {args.out}/; every check passed")
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
