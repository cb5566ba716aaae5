"""A program built cleanly before skips the build phase and its worker; one whose extension left the cache, or whose
build failed, is built again."""

import uuid

from kforge.backends import get_backend
from kforge.candidate import Candidate
from kforge.problems import resolve_problem
from kforge.verify import Verifier
from kforge.verify.build_memo import BuildMemo
from kforge.verify.protocol import BuildRequest, BuildResult
from tests.helpers import candidate, fast_config

RELU = resolve_problem("level1/1_ReLU", size="cpu", overrides={"BATCH": 8, "DIM": 4096})


def test_a_clean_build_is_remembered_and_the_second_verification_needs_no_build_worker(pool, tmp_path):
    # A build cache kept between local runs (KFORGE_TEST_CACHE) remembers every earlier run's programs: a new one.
    source = f"# {uuid.uuid4().hex}: a program no earlier run remembered\n" + candidate("cpu", "relu_ok.py")
    verifier = Verifier(fast_config(trials=2), pool=pool)
    assert not verifier.build_known(RELU, Candidate.from_source(source), "cpu")
    first = verifier.verify(RELU, source, "cpu")
    assert first.correct and not first.build.get("remembered"), first.summary()
    assert verifier.build_known(RELU, Candidate.from_source(source), "cpu")
    requests = pool.counters["build"]
    again = verifier.verify(RELU, source, "cpu")
    assert again.correct and again.build["remembered"] and again.build["cached"], again.build
    assert pool.counters["build"] == requests  # no build request was sent


def test_a_remembered_build_counts_only_while_its_extensions_are_cached(tmp_path):
    memo = BuildMemo(tmp_path / "memo")
    request, files = BuildRequest(backend=get_backend("cpu").spec()), {"candidate.py": "c", "problem.py": "p"}
    key = memo.key(request, files)
    ext = tmp_path / "ext" / "kf_relu_abc"
    ext.mkdir(parents=True)
    memo.put(key, BuildResult(built=[str(ext)]))
    assert memo.get(key).cached == [str(ext)] and memo.get(key).built == []
    assert memo.get(memo.key(request, {**files, "problem.py": "another problem"})) is None
    ext.rmdir()
    assert memo.get(key) is None  # its extension left the build cache: build again
    for failed in (BuildResult(compile_error="x"), BuildResult(import_error="y"), BuildResult(failed={"k": "log"}),
                   BuildResult(refused_write="z")):
        other = memo.key(request, {**files, "candidate.py": repr(failed)})
        memo.put(other, failed)
        assert memo.get(other) is None
