"""Host GPU facts (`kforge.sandbox.gpus`), with a fake nvidia-smi on PATH so they run on CPU."""

from __future__ import annotations

import os
import stat

import pytest

from kforge.sandbox.gpus import arch_of, detect_gpus, mps_control_pipe


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    """An nvidia-smi that lists GPUs 0, 1 and 2, first on PATH."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\nprintf '0\\n1\\n2\\n'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return smi


def test_every_gpu_nvidia_smi_lists_when_cuda_visible_devices_is_unset(fake_smi, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert detect_gpus() == [0, 1, 2]


def test_cuda_visible_devices_picks_and_orders_the_gpus_and_drops_absent_ones(fake_smi, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0,7")
    assert detect_gpus() == [2, 0]


@pytest.mark.parametrize("hidden", ["", "-1"])
def test_hidden_gpus_are_none_though_nvidia_smi_lists_some(fake_smi, monkeypatch, hidden):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
    assert detect_gpus() == []


def test_no_nvidia_smi_means_no_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert detect_gpus() == []


def test_arch_of_names_the_arch_specific_target_from_hopper_on():
    assert arch_of([9, 0]) == "9.0a"
    assert arch_of((10, 0)) == "10.0a"
    assert arch_of([8, 6]) == "8.6"


def test_the_mps_control_socket_is_found_where_cuda_clients_would_look(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))
    assert mps_control_pipe() is None
    (tmp_path / "control").touch()
    assert mps_control_pipe() == str(tmp_path / "control")
