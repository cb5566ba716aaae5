"""The write guard, in a child process (an audit hook stays for the life of the process that installs it)."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import kforge

# Run as the child's main program: the guard, then "candidate code" (a file named candidate.py, as the harness
# names it) trying each write, then the harness itself writing into kforge's cache.
CHILD = """
import json, os, sys, tempfile
sys.path.insert(0, {pkg!r})
from kforge.sandbox.writeguard import install_write_guard
os.chdir({workdir!r})
guard = install_write_guard(os.getcwd(), {build_cache!r})
sys.path.insert(0, os.getcwd())
import candidate
results = candidate.attempt({targets!r})
harness = os.path.join({store!r}, "compile_ref", "harness.json")  # no candidate frame on the stack
os.makedirs(os.path.dirname(harness), exist_ok=True)
open(harness, "w").write("{{}}")
print(json.dumps({{"results": results, "refused": guard.refused, "finding": guard.finding()}}))
"""

CANDIDATE = """
import os, tempfile

def attempt(targets):
    out = {}
    for name, path in targets.items():
        try:
            if name == "rename_into_kforge":
                src = os.path.join(tempfile.mkdtemp(), "x")
                open(src, "w").close()
                os.replace(src, path)
            elif name == "mkdir_in_workdir":
                os.makedirs(path)
            elif name.startswith("cache_"):  # as a library fills its cache: the folders, then the file
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as fh:
                    fh.write(b"cubin")
            else:
                with open(path, "w") as fh:
                    fh.write("// kernel")
            out[name] = "written"
        except PermissionError:
            out[name] = "refused"
    return out
"""


def test_a_candidate_writes_where_it_builds_and_nowhere_of_kforges(tmp_path):
    pool = tmp_path / "pool"
    workdir = pool / "work" / "abc"
    other = pool / "work" / "other"
    store = tmp_path / "kcache"
    build_cache = store / "ext"
    for d in (workdir, other, build_cache / "builds" / "k1", store / "triton"):
        d.mkdir(parents=True)
    (workdir / "candidate.py").write_text(CANDIDATE)
    pycache = Path(kforge.__file__).parent / "__pycache__" / "kf_probe.cpython-99.pyc"
    targets = {
        "workdir_file": str(workdir / "fused.cu"),
        "relative_file": "fused.cpp",
        "mkdir_in_workdir": str(workdir / "build" / "obj"),
        "temp_dir": str(Path(tmp_path.parent) / f"kf_guard_{tmp_path.name}.cu"),
        "build_cache": str(build_cache / "builds" / "k1" / "main.cpp"),
        "triton_cache_in_kforges": str(store / "triton" / "k.json"),  # TRITON_CACHE_DIR points there
        "kforge_module": str(Path(kforge.__file__).parent / "kf_probe.py"),
        "rename_into_kforge": str(Path(kforge.__file__).parent / "kf_probe2.py"),
        "compile_ref_cache": str(store / "compile_ref" / "x.json"),
        "other_workdir": str(other / "candidate.py"),
        "up_and_over": "../other/problem.py",
        "python_install": str(Path(json.__file__).parent / "kf_probe.py"),
        "pycache": str(pycache),
    }
    code = CHILD.format(pkg=str(Path(kforge.__file__).parent.parent), workdir=str(workdir),
                        build_cache=str(build_cache), store=str(store), targets=targets)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "KFORGE_CACHE_DIR": str(store),
           "TRITON_CACHE_DIR": str(store / "triton")}
    probes = [Path(targets[k]) for k in ("kforge_module", "rename_into_kforge", "python_install", "temp_dir")]
    try:
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                              env=env, timeout=60)
    finally:  # were the guard broken, its probes must not stay in kforge's package or the Python installation
        kept = [p for p in probes + [pycache] if p.exists()]
        for p in kept:
            p.unlink()
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    results = got["results"]
    for allowed in ("workdir_file", "relative_file", "mkdir_in_workdir", "temp_dir", "build_cache",
                    "triton_cache_in_kforges"):
        assert results[allowed] == "written", (allowed, results)
    for kept_out in ("kforge_module", "rename_into_kforge", "compile_ref_cache", "other_workdir", "up_and_over",
                     "python_install", "pycache"):
        assert results[kept_out] == "refused", (kept_out, results)
    # Each refusal is remembered, except the import system's bytecode cache (no blame, nothing written).
    assert len(got["refused"]) == 6 and not any("__pycache__" in p for p in got["refused"]), got["refused"]
    assert got["finding"][0] == "environment" and "kf_probe.py" in got["finding"][1], got["finding"]
    assert (store / "compile_ref" / "harness.json").is_file()  # the harness's own write went through
    assert [str(p) for p in kept] == [targets["temp_dir"]], kept


def test_library_kernel_caches_are_writable_and_kforges_own_stay_refused(tmp_path):
    """CuPy's RawKernel writes its cubin to ~/.cupy/kernel_cache (or CUPY_CACHE_DIR), the driver its JIT cache to
    ~/.nv/ComputeCache (or CUDA_CACHE_PATH), torch and Triton theirs under ~/.cache and ~/.triton: a candidate
    compiling through them is not refused. A named cache goes through wherever it points, kforge's cache too."""
    home, store = tmp_path / "home", tmp_path / "kcache"
    workdir, build_cache = tmp_path / "pool" / "work" / "abc", store / "ext"
    for d in (workdir, build_cache, home, tmp_path / "tmp"):
        d.mkdir(parents=True)
    (workdir / "candidate.py").write_text(CANDIDATE)
    targets = {
        "cache_cupy": str(home / ".cupy" / "kernel_cache" / "a1b2.cubin"),
        "cache_cupy_named": str(store / "cupy" / "a1b2.cubin"),  # CUPY_CACHE_DIR points into kforge's cache
        "cache_nv": str(home / ".nv" / "ComputeCache" / "7" / "3" / "f00d"),
        "cache_nv_named": str(tmp_path / "nvjit" / "index"),  # CUDA_CACHE_PATH
        "cache_triton": str(home / ".triton" / "cache" / "k" / "k.cubin"),
        "cache_torch_extensions": str(home / ".cache" / "torch_extensions" / "py311" / "k" / "main.cpp"),
        "cache_kforges_in_home": str(home / ".cache" / "kforge" / "audit" / "x.json"),
        "cache_kforges": str(store / "compile_ref" / "x.json"),
        "home_dotfile": str(home / ".bashrc"),
        "cache_nv_beside": str(home / ".nvidia-settings-rc"),
    }
    code = CHILD.format(pkg=str(Path(kforge.__file__).parent.parent), workdir=str(workdir),
                        build_cache=str(build_cache), store=str(store), targets=targets)
    # The child's temporary directory apart from this "home" (both lie in pytest's, which the guard allows).
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(tmp_path / "tmp"), "KFORGE_CACHE_DIR": str(store),
           "CUPY_CACHE_DIR": str(store / "cupy"), "CUDA_CACHE_PATH": str(tmp_path / "nvjit")}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    results = got["results"]
    for allowed in ("cache_cupy", "cache_cupy_named", "cache_nv", "cache_nv_named", "cache_triton",
                    "cache_torch_extensions"):
        assert results[allowed] == "written" and Path(targets[allowed]).is_file(), (allowed, results)
    for kept_out in ("cache_kforges_in_home", "cache_kforges", "home_dotfile", "cache_nv_beside"):
        assert results[kept_out] == "refused" and not Path(targets[kept_out]).exists(), (kept_out, results)
    assert got["finding"][0] == "environment", got


def test_a_dsl_kernel_cache_its_backend_made_is_writable_and_the_folder_above_it_is_not(tmp_path, monkeypatch):
    """TileLang on an H100: its cache's makedirs touched kforge's build cache above it, and every oracle came out
    cheat_detected. The backend makes the folder and names it before candidate code runs."""
    from kforge.backends.base import WorkerContext
    from kforge.sandbox.writeguard import WriteGuard
    build_cache = tmp_path / "kc" / "ext"
    monkeypatch.setenv("TILELANG_CACHE_DIR", "")  # restored after the test
    WorkerContext(cache_dir=str(build_cache)).library_cache("tilelang", "TILELANG_CACHE_DIR")
    guard = WriteGuard(str(tmp_path / "work"), str(build_cache))
    assert (build_cache / "tilelang").is_dir()
    assert guard.allows(str(build_cache / "tilelang" / "kernel_abc" / "kernel.so"))
    assert not guard.allows(str(build_cache)) and not guard.allows(str(build_cache / "audit" / "x.json"))
