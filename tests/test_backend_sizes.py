"""docs/backends.md's table of each backend's size in lines is what scripts/backend_sizes.py counts now."""

import importlib.util

from kforge import REPO_DIR


def test_the_docs_table_of_backend_sizes_is_current():
    spec = importlib.util.spec_from_file_location("backend_sizes", REPO_DIR / "scripts" / "backend_sizes.py")
    sizes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sizes)
    doc = (REPO_DIR / "docs" / "backends.md").read_text()
    block = doc.split("<!-- sizes -->\n", 1)[1].split("\n<!-- /sizes -->", 1)[0]
    assert block == sizes.table(), "run `python scripts/backend_sizes.py` and paste its table into docs/backends.md"
    assert [r["backend"] for r in sizes.sizes()] == ["cpu", "cuda", "triton", "opencl", "cute", "tilelang"]
