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
