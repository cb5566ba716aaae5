"""Whole-workload mode (see docs/workload.md)."""
