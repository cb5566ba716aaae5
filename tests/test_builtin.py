"""Every built-in problem runs at its CPU size, and correct candidates pass: its seeding and
tolerances work (a pure-PyTorch candidate), and its hand-written C++ solution (the `oracle`) is right."""

import pytest

from kforge.problems import builtin_solution_path, load_builtin
from kforge.verify import State, Verifier
from tests.helpers import fast_config

PROBLEMS = load_builtin(size="cpu")


@pytest.fixture(scope="module")
def verifier(pool):
    return Verifier(fast_config(), pool=pool)


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p.key for p in PROBLEMS])
def test_reference_and_pure_pytorch_candidate(verifier, problem):
    # The reference itself, subclassed: same parameters in the same order, so seeding must match.
    source = problem.source + "\n\nclass ModelNew(Model):\n    pass\n"
    v = verifier.verify(problem, source, "cpu", config=fast_config(require_kernel=False, variants=True))
    assert v.state is State.CORRECT, v.summary()
    assert not any("skipped" in n for n in v.evidence.notes), v.summary()  # its variants are valid sizes
    assert v.ref.median_ms < 500, f"{problem.key}: reference takes {v.ref.median_ms:.0f} ms at the cpu size"


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p.key for p in PROBLEMS])
def test_cpu_oracle_is_correct(verifier, problem):
    path = builtin_solution_path(problem, "cpu")
    assert path is not None, f"{problem.key} has no cpu solution"
    v = verifier.verify(problem, path.read_text(), "cpu", config=fast_config(trials=3, variants=True))
    assert v.state is State.CORRECT, v.summary()  # at its size, and at sizes it was not written for


GPU_PROBLEMS = load_builtin(size="gpu")


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "triton"])
@pytest.mark.parametrize("problem", GPU_PROBLEMS, ids=[p.key for p in GPU_PROBLEMS])
def test_gpu_oracle_is_correct(pool, problem, backend):
    path = builtin_solution_path(problem, backend)
    if path is None:
        pytest.skip(f"{problem.key} has no {backend} solution")
    v = Verifier(fast_config(trials=3, variants=True), pool=pool).verify(problem, path.read_text(), backend)
    assert v.state is State.CORRECT, v.summary()
