"""`kforge eval`'s inputs as people write them: a manifest saved by Excel, a mistyped --level or --ids."""

import json

from kforge.cli import main
from kforge.evaluate import read_manifest


def test_a_manifest_with_a_byte_order_mark_reads_as_without(tmp_path):
    """Excel's "CSV UTF-8" starts the file with a BOM: "the CSV header lacks problem"."""
    (tmp_path / "m.csv").write_bytes("problem,candidate\nlevel1/1_ReLU,a.py\n".encode("utf-8-sig"))
    (tmp_path / "m.jsonl").write_bytes((json.dumps({"problem": "level1/1_ReLU", "candidate": "a.py"}) + "\n")
                                       .encode("utf-8-sig"))
    for name in ("m.csv", "m.jsonl"):
        jobs = read_manifest(tmp_path / name, "cpu")
        assert [(j.problem, j.candidate.name) for j in jobs] == [("level1/1_ReLU", "a.py")], name


def test_a_bad_level_or_ids_selection_names_its_flag(tmp_path, capsys):
    """`--level x` said "bad problem id selection 'x'"."""
    (tmp_path / "KB" / "KernelBench" / "level1").mkdir(parents=True)
    (tmp_path / "run").mkdir()
    for flag in ("--level", "--ids"):
        assert main(["eval", str(tmp_path / "KB"), str(tmp_path / "run"), flag, "x"]) == 2
        err = capsys.readouterr().err
        assert f"bad {flag} selection 'x'" in err and "problem id" not in err, err
