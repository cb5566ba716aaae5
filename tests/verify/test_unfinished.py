"""A run that ended without a result (`kforge.verify.unfinished.no_result`): a crash says what it most often means
where it happened."""

from kforge.sandbox.protocol import Reply
from kforge.verify.config import VerifyConfig
from kforge.verify.unfinished import no_result


def test_a_crash_says_what_it_most_often_means_where_it_happened():
    at_variant = no_result(Reply(slot="cpu", signal="SIGSEGV", phase="shape variants: shape variant batch_size=11"),
                           VerifyConfig())
    assert at_variant.message.startswith("the candidate's process died with SIGSEGV during shape variants")
    assert "a crash at a size it was not shown" in at_variant.message
    # an OpenCL kernel reading float from a half buffer: a bare SIGSEGV said nothing of the precision
    at_fp16 = no_result(Reply(slot="cpu", signal="SIGSEGV", phase="correctness"), VerifyConfig(precision="fp16"))
    assert "the problem runs at fp16: its inputs and parameters take 2 bytes an element" in at_fp16.message
    plain = no_result(Reply(slot="cpu", signal="SIGSEGV", phase="correctness"), VerifyConfig())
    assert plain.message == "the candidate's process died with SIGSEGV during correctness"
    killed = no_result(Reply(slot="cpu", signal="SIGKILL", phase="correctness"), VerifyConfig(precision="bf16"))
    assert "out-of-memory killer" in killed.message and "bytes an element" not in killed.message
    hung = no_result(Reply(slot="cpu", timed_out=True, phase="shape variant batch_size=23, dim=191"), VerifyConfig())
    assert hung.message.startswith("killed after 300 s (during shape variant batch_size=23, dim=191: a hang at a size")
