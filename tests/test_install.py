"""kforge as an installed package: a wheel, installed non-editable into a fresh environment, runs a
sweep from any directory with its console scripts (prompts and configs travel as package data)."""

import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

from kforge import REPO_DIR
from tests.helpers import FAST

SHIPPED = ("pyproject.toml", "README.md", "kforge", "conf", "prompts")


def test_the_package_list_names_every_subpackage():
    text = (REPO_DIR / "pyproject.toml").read_text()
    listed = set(re.findall(r'"(kforge[\w.]*)"', text.split("packages = [", 1)[1].split("]", 1)[0]))
    found = {".".join(p.parent.relative_to(REPO_DIR).parts) for p in (REPO_DIR / "kforge").rglob("__init__.py")}
    assert found <= listed, f"add {sorted(found - listed)} to [tool.setuptools] packages in pyproject.toml"
    assert {"kforge.conf", "kforge.prompts"} <= listed


def _pip_has_python_option() -> bool:
    return tuple(int(x) for x in version("pip").split(".")[:2]) >= (22, 3)


@pytest.mark.skipif(not _pip_has_python_option(), reason="pip >= 22.3 installs into another environment (--python)")
def test_wheel_installed_in_a_fresh_environment_runs_a_sweep_from_anywhere(tmp_path, cache_dir):
    src = tmp_path / "src"  # a copy: building writes build/ and *.egg-info/ next to the sources
    src.mkdir()
    for name in SHIPPED:
        copy = shutil.copytree if (REPO_DIR / name).is_dir() else shutil.copy
        copy(REPO_DIR / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                            if (REPO_DIR / name).is_dir() else {}))
    try:  # this environment's setuptools, if it has one recent enough; else pip fetches one
        isolation = ["--no-build-isolation"] if int(version("setuptools").split(".")[0]) >= 64 else []
    except PackageNotFoundError:
        isolation = []
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-q", "-w", str(tmp_path / "dist"),
                    *isolation], check=True, capture_output=True, timeout=600)
    wheel = next((tmp_path / "dist").glob("kforge-*.whl"))

    # A fresh environment; its dependencies (torch, mlflow, ...) are read from this one's site
    # directories, listed in a .pth file (whose own .pth files, such as an editable kforge's, are not run).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    deps = dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    Path(purelib, "kforge_test_deps.pth").write_text("\n".join(deps) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
                    str(wheel)], check=True, capture_output=True, timeout=600)

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = tmp_path / "elsewhere"
    where.mkdir()
    found = subprocess.run([str(python), "-c", "import kforge; print(kforge.__file__); print(kforge.DATA_DIR)"],
                           capture_output=True, text=True, env=env, cwd=where, check=True).stdout.split()
    assert found[0].startswith(purelib) and found[1] == str(Path(found[0]).parent)  # the wheel's, with its data
    fast = [o for o in FAST if not o.startswith(("problems.names", "problems.overrides"))]
    res = subprocess.run([str(venv / "bin" / "kforge-synthesize"), "model=oracle", "backend=cpu", "problems=builtin_l1",
                          "problems.ids=1", "problems.overrides={BATCH:8,DIM:4096}", "loop.iterations=1", *fast],
                         capture_output=True, text=True, env=env, cwd=where, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "level1/1_ReLU" in res.stdout and "correct 100%" in res.stdout and (where / "mlflow.db").is_file()
    tables = subprocess.run([str(venv / "bin" / "kforge-tables"), "ablations=[single_vs_iterative]"],
                            capture_output=True, text=True, env=env, cwd=where, timeout=600)
    assert tables.returncode == 0 and "no finished runs" in tables.stdout, tables.stderr[-2000:]
    helped = subprocess.run([str(venv / "bin" / "kforge-reproduce"), "--help"], capture_output=True, text=True,
                            env=env, cwd=where, timeout=300)
    assert helped.returncode == 0 and "--models" in helped.stdout
