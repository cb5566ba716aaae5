"""Every built-in problem runs at its CPU size, and correct candidates pass: its seeding and
tolerances work (a pure-PyTorch candidate), and its hand-written C++ solution (the `oracle`) is right."""

import pytest

from kforge.problems import BUILTIN_DIR, ProblemError, builtin_solution_path, load_builtin
from kforge.verify import State, Verifier
from tests.helpers import fast_config

PROBLEMS = load_builtin(size="cpu")


def test_solution_lookup_takes_the_precision_folder_first():
    relu, matmul = load_builtin(names=["level1/1_ReLU", "level1/4_Matmul"])
    solutions = BUILTIN_DIR / "solutions"
    assert builtin_solution_path(matmul, "cuda") == solutions / "cuda" / "level1" / "4_Matmul.py"
    assert builtin_solution_path(matmul, "cuda", "bf16") == solutions / "cuda" / "bf16" / "level1" / "4_Matmul.py"
    # no bf16 folder of its own: the backend's dtype-generic file
    assert builtin_solution_path(relu, "cpu", "bf16") == solutions / "cpu" / "level1" / "1_ReLU.py"
    assert builtin_solution_path(matmul, "metal", "bf16") is None
    with pytest.raises(ProblemError, match="unknown precision 'bf15'"):
        builtin_solution_path(matmul, "cuda", "bf15")


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


# -- the backward mode: training steps (kforge.verify.backward) -------------------------------------------
#: What the backward oracles cover on every backend (ReLU, Softmax, LayerNorm, Matmul, RMSNorm-SiLU gate, MLP block).
BACKWARD_ORACLES = {"level1/1_ReLU", "level1/2_Softmax", "level1/3_LayerNorm", "level1/4_Matmul",
                    "level2/4_RMSNorm_SiLUGate", "level3/1_MLPBlock"}


@pytest.mark.parametrize("backend", ["cpu", "cuda", "triton"])
def test_every_backend_has_the_backward_oracles(backend):
    have = {p.key for p in PROBLEMS if builtin_solution_path(p, backend, backward=True)}
    assert BACKWARD_ORACLES <= have, f"{backend} lacks backward solutions of {sorted(BACKWARD_ORACLES - have)}"
    for p in PROBLEMS:  # labelled: the oracle's answers are hand-written, not a model's
        path = builtin_solution_path(p, backend, backward=True)
        assert path is None or "oracle, not an LLM" in path.read_text().splitlines()[0], path


CPU_BACKWARD = [p for p in PROBLEMS if builtin_solution_path(p, "cpu", backward=True)]


@pytest.mark.parametrize("problem", CPU_BACKWARD, ids=[p.key for p in CPU_BACKWARD])
def test_cpu_backward_oracle_is_correct(verifier, problem):
    path = builtin_solution_path(problem, "cpu", backward=True)
    v = verifier.verify(problem, path.read_text(), "cpu", config=fast_config(trials=3, backward=True, variants=True))
    assert v.state is State.CORRECT, v.summary()  # shape variants included: the training step at other sizes
    a = v.attribution
    assert a.backward_share and a.backward_share > 0.5 and a.gradient_from_kernel, v.summary()


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "triton"])
@pytest.mark.parametrize("problem", GPU_PROBLEMS, ids=[p.key for p in GPU_PROBLEMS])
def test_gpu_backward_oracle_is_correct(pool, problem, backend):
    path = builtin_solution_path(problem, backend, backward=True)
    if path is None:
        pytest.skip(f"{problem.key} has no {backend} backward solution")
    cfg = fast_config(trials=3, backward=True, variants=True)
    v = Verifier(cfg, pool=pool).verify(problem, path.read_text(), backend)
    assert v.state is State.CORRECT, v.summary()
    assert v.attribution.backward_share and v.attribution.gradient_from_kernel, v.summary()
