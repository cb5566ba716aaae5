"""benchmarks/precision_oracle.py on the cpu backend: its table and JSON rows for a problem it can run here
(through the verifier where it takes a precision, else through the script's own harness)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "precision_oracle.py"


def _load():
    spec = importlib.util.spec_from_file_location("precision_oracle", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["precision_oracle"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_cpu_rows_and_table(tmp_path, cache_dir, capsys):
    bench = _load()
    out = tmp_path / "rows.json"
    rc = bench.main(["--backends", "cpu", "--size", "cpu", "--problems", "1_ReLU", "--json", str(out),
                     "--quick"])
    printed = capsys.readouterr().out
    rows = json.loads(out.read_text())
    assert rc == 0, printed
    assert [(r["problem"], r["backend"], r["state"]) for r in rows] == [("level1/1_ReLU", "cpu", "correct")]
    row = rows[0]
    assert row["oracle_ms"] > 0 and row["eager_ms"] > 0 and row["fp32_eager_ms"] > 0
    assert abs(row["speedup"] - row["eager_ms"] / row["oracle_ms"]) < 1e-9
    assert row["solution"] == "cpu/level1/1_ReLU.py"  # the dtype-generic file: cpu has no bf16 folder
    assert "level1/1_ReLU" in printed and "1/1 correct" in printed
