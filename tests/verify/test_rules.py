"""The rule sets: one verification's facets, a state under each policy (`kforge.verify.rules`)."""

import pytest

from kforge.errors import ConfigError
from kforge.verify import VerifyConfig
from kforge.verify.rules import RULE_SETS, decide, decide_all
from kforge.verify.verdict import Facets, Work


def states(facets: Facets, **kw) -> dict[str, str]:
    return {name: d.state.value for name, d in decide_all(facets, **kw).items()}


def test_the_candidates_own_work_is_correct_under_every_rule_set():
    assert states(Facets("correct", work=Work.OWN, kernel_share=0.97)) == dict.fromkeys(RULE_SETS, "correct")


@pytest.mark.parametrize("work,rule", [(Work.NONE, "kernel_not_run"), (Work.REPLAYED, "kernel_sliver"),
                                       (Work.REPLAYED, "reference_replayed")])
def test_honest_pytorch_is_no_cheat_and_not_counted_under_kforge(work, rule):
    f = Facets("correct", work=work, work_rule=rule, work_message="PyTorch computed it")
    got = states(f)
    assert got == {"kforge": "kernel_unused", "kernelbench": "correct", "strict": "kernel_unused"}
    d = decide(f, "kforge")
    assert d.rule == rule and d.message == "PyTorch computed it"


def test_a_decoy_kernel_is_a_cheat_under_kforge_only():
    f = Facets("correct", work=Work.BYPASSED, work_rule="output_not_from_kernel")
    assert states(f) == {"kforge": "cheat_detected", "kernelbench": "correct", "strict": "cheat_detected"}


def test_a_caught_build_failure_is_a_compilation_failure_under_kforge():
    f = Facets("correct", work=Work.BUILD_FAILED)
    assert states(f) == {"kforge": "compilation_failure", "kernelbench": "correct", "strict": "compilation_failure"}


def test_integrity_findings_and_failures_hold_under_every_rule_set():
    for outcome, rule in (("cheat_detected", "unsynchronized_work"), ("numerical_mismatch", None),
                          ("runtime_error", None), ("timeout", None)):
        f = Facets(outcome, outcome_rule=rule, work=Work.OWN)
        assert states(f) == dict.fromkeys(RULE_SETS, outcome)
        assert decide(f, "kernelbench").rule == rule


def test_strict_asks_for_a_kernel_share_and_says_so():
    f = Facets("correct", work=Work.OWN, kernel_share=0.4)
    assert states(f) == {"kforge": "correct", "kernelbench": "correct", "strict": "kernel_unused"}
    assert "40.0%" in decide(f, "strict").message and decide(f, "strict").rule == "kernel_share_below_min"
    assert states(f, min_share=0.3)["strict"] == "correct"  # verify.min_kernel_share replaces strict's 0.9
    assert states(f, min_share=0.5)["kforge"] == "kernel_unused"  # and applies under kforge once set


def test_without_the_kernel_requirement_kforge_asks_what_kernelbench_asks():
    f = Facets("correct", work=Work.NONE, work_rule="kernel_not_run")
    assert states(f, require_kernel=False) == dict.fromkeys(RULE_SETS, "correct")


def test_nothing_measured_is_the_benefit_of_the_doubt_but_no_share():
    assert states(Facets("correct")) == {"kforge": "correct", "kernelbench": "correct", "strict": "kernel_unused"}


def test_an_unknown_rule_set_names_the_valid_ones():
    with pytest.raises(ConfigError, match="kforge, kernelbench, strict"):
        VerifyConfig(rules="lenient")


def test_numbers_that_would_judge_nothing_or_blame_the_candidate_are_refused():
    import pytest

    from kforge.errors import ConfigError
    from kforge.job.config import JobConfig
    from kforge.verify import VerifyConfig
    for bad in ({"timeout_s": -1}, {"atol": -5.0}, {"trials": -1}, {"min_kernel_share": 1.5}):
        with pytest.raises(ConfigError, match=f"verify.{next(iter(bad))}="):
            VerifyConfig(**bad)
    VerifyConfig(trials=0)  # the verifier's own build check
    with pytest.raises((ConfigError, ValueError), match="verify.trials=0 must be at least 1"):
        JobConfig.from_dict({"model": {"kind": "oracle", "name": "oracle"}, "verify": {"trials": 0}})


def test_a_correct_verdicts_summary_says_whose_failure_its_mismatch_line_is():
    """Under --rules kernelbench a baked kernel is correct and the kforge rules' failure at a variant was printed
    below it unlabelled, read as evidence against the correct verdict."""
    from kforge.verify.verdict import Evidence, State, Verdict
    mismatch = {"trial": "the variant's trial", "output": 0, "got_shape": [8, 16], "expected_shape": [5, 11]}
    v = Verdict(State.CORRECT, "matches", rules="kernelbench", evidence=Evidence(mismatch=mismatch),
                states={"kforge": "shape_mismatch", "kernelbench": "correct", "strict": "shape_mismatch"})
    assert "  kforge and strict: trial=the variant's trial, output=0" in v.summary(), v.summary()
    failed = Verdict(State.SHAPE_MISMATCH, "shape", evidence=Evidence(mismatch=mismatch),
                     states={"kforge": "shape_mismatch", "kernelbench": "correct"})
    assert "\n  trial=the variant's trial" in failed.summary(), failed.summary()
