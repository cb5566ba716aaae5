"""The rows of a manifest: a CSV file with a header row, or JSONL with one object a line.

``kforge eval --manifest`` and ``benchmarks/kernelbench_agreement.py`` both read one; each checks the
columns it needs and raises its own error class, so a user's message names the command they ran.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")


def manifest_rows(path: Path, error: type[Exception], columns: str) -> list[tuple[int, dict[str, str]]]:
    """``(line number, row)`` for every row of ``path``, values as stripped strings. A row must have a
    ``problem`` and a ``candidate`` column; ``columns`` names every column in the error messages
    (``problem,candidate[,backend]``)."""
    text = path.read_text(encoding="utf-8-sig", errors="replace")  # utf-8-sig: Excel's CSVs start with a BOM
    if path.suffix in JSON_SUFFIXES:
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise error(f"{path}:{n}: not JSON ({exc.msg}); a JSONL manifest has one object a line") from None
            if not isinstance(rec, dict):
                raise error(f"{path}:{n}: expected an object with problem and candidate")
            out.append((n, {str(k): str(v if v is not None else "").strip() for k, v in rec.items()}))
        return out
    reader = csv.DictReader(text.splitlines())
    missing = {"problem", "candidate"} - {(c or "").strip() for c in reader.fieldnames or []}
    if missing:
        raise error(f"{path}: the CSV header lacks {', '.join(sorted(missing))} (columns: {columns})")
    out = []
    for n, row in enumerate(reader, 2):
        if None in row:  # csv keeps a row's extra fields under None, as a list
            raise error(f"{path}:{n}: {len(row[None])} field(s) more than the header's columns ({columns}); quote a "
                        "value that holds a comma")
        out.append((n, {(k or "").strip(): (v or "").strip() for k, v in row.items()}))
    return out
