"""Reading what earlier jobs of a configuration left (kforge/tracking/resume.py): a whole-model job's folder."""

import time

from kforge.tracking import Tracker
from kforge.tracking.resume import workload_folders
from kforge.tracking.schema import Tags, WorkloadTags


def test_workload_folders_of_a_configuration_newest_first(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert workload_folders(uri, "kforge", "abc") == []
    assert not (tmp_path / "mlflow.db").exists()  # read before the job's tracker: nothing is created
    tracker = Tracker(uri)
    tracker.start_parent("old", {}, "", {Tags.CONFIG_HASH: "abc", WorkloadTags.DIR: "/w/old"})
    tracker.start_parent("plain", {}, "", {Tags.CONFIG_HASH: "abc"})  # not a whole-model job
    tracker.start_parent("other", {}, "", {Tags.CONFIG_HASH: "xyz", WorkloadTags.DIR: "/w/other"})
    time.sleep(0.01)  # a later start time
    tracker.start_parent("new", {}, "", {Tags.CONFIG_HASH: "abc", WorkloadTags.DIR: "/w/new"})
    assert workload_folders(uri, "kforge", "abc") == ["/w/new", "/w/old"]
    assert workload_folders(uri, "another experiment", "abc") == []
