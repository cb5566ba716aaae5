"""What the reference throws away, measured: a discarded kernel result is a decoy only where the reference does
not discard the same value."""

from pathlib import Path

import torch

from kforge.verify.deadcode import Liveness, Signature, Signer
from tests.exploits.test_corpus import check

IDIOMS = Path(__file__).parents[1] / "idioms"


def lstm_cn(x, h0, c0, lstm, fc):
    out, state = lstm(x, (h0, c0))
    fc(out[:, -1, :])  # computed and thrown away, as KernelBench's LSTMCn does
    return state[1]


def test_the_references_dead_results_are_found_with_their_values():
    torch.manual_seed(0)
    lstm, fc = torch.nn.LSTM(8, 16, 2, batch_first=True), torch.nn.Linear(16, 5)
    x, h0, c0 = torch.rand(3, 4, 8), torch.rand(2, 3, 16), torch.rand(2, 3, 16)
    with torch.no_grad():
        with Liveness(torch) as live:
            cell = lstm_cn(x, h0, c0, lstm, fc)
        dead = live.dead(cell)
        out, _ = lstm(x, (h0, c0))
        expected = fc(out[:, -1, :])
    signer = Signer(torch)
    signer.add(expected)
    mine = signer.read()[0]
    assert any(mine.matches(d, 1e-4, 1e-4) for d in dead), (mine, dead)
    signer.add(torch.zeros(3, 5) + fc.bias)  # a kernel on a dummy input: same shape, another value
    dummy = signer.read()[1]
    assert not any(dummy.matches(d, 1e-4, 1e-4) for d in dead)
    # The output itself, and what it derives from, is live.
    signer.add(cell)
    assert not any(signer.read()[2].matches(d, 1e-4, 1e-4) for d in dead if d.shape == tuple(cell.shape))


def test_a_signature_matches_within_the_tolerance_only():
    a = Signature((4,), "float32", 10.0, 12.0)
    assert a.matches(Signature((4,), "float32", 10.0 + 1e-4, 12.0), 1e-4, 1e-4)
    assert not a.matches(Signature((4,), "float32", 10.5, 12.0), 1e-4, 1e-4)
    assert not a.matches(Signature((2, 2), "float32", 10.0, 12.0), 1e-4, 1e-4)
    assert not a.matches(Signature((4,), "float64", 10.0, 12.0), 1e-4, 1e-4)


def test_mirrored_dead_code_is_no_cheat_under_any_rule_set(pool):
    v = check(pool, IDIOMS / "cpu" / "h_mirrored_dead_code.py", "cpu", "cpu")
    assert v.states == {"kforge": "kernel_unused", "kernelbench": "correct", "strict": "kernel_unused"}, v.summary()
    assert v.attribution.output_from_kernel is False and "discards" in v.message, v.summary()
