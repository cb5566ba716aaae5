"""The extension builder's bookkeeping of failed builds (what a verification's run phase is told)."""

import pytest

from kforge.backends.build import Builder, CompilationError

SOURCE = "int f() { return 1 }"  # a missing semicolon


def test_a_build_known_to_have_failed_fails_at_once_with_its_log(tmp_path):
    builder = Builder(tmp_path)
    key = builder.key("kf_fails", [SOURCE], None, {})
    builder.known_failures = {key: "main.cpp:1: error: expected ';' before '}' token"}
    with pytest.raises(CompilationError, match="expected ';'"):
        builder.load_inline("kf_fails", [SOURCE])
    assert builder.failed == {key: builder.known_failures[key]}
    assert not (tmp_path / "builds").exists() and builder.built == []  # nothing was compiled
    # Another source is not taken for the failed one.
    assert builder.key("kf_fails", ["int f() { return 1; }"], None, {}) != key
