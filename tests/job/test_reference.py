"""Reference transfer: where a reference comes from, and problems without one."""

import pytest
from mlflow.tracking import MlflowClient

from kforge.errors import ConfigError
from kforge.job.reference import ReferenceTransferError, load_references
from kforge.problems import load_builtin, load_problem_file

SRC = ("import torch\nN = 8\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
       "def get_inputs():\n    return [torch.randn(N)]\ndef get_init_inputs():\n    return []\n")


def test_oracle_reference_and_missing_one(tmp_path):
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "7_Double.py").write_text(SRC)
    problems = load_builtin(names=["level1/1_ReLU"]) + [load_problem_file(tmp_path / "level1" / "7_Double.py")]
    refs = load_references({"kind": "oracle", "backend": "auto"}, problems, "cpu")
    relu = refs["level1/1_ReLU"]
    assert relu.backend == "cuda" and "__global__" in relu.code and relu.source == "oracle"
    assert refs["level1/7_Double"] is None  # not in the suite: runs without a reference
    assert load_references({"kind": "oracle", "backend": "auto"}, problems[:1], "cuda")["level1/1_ReLU"].backend == \
        "triton"


def test_oracle_reference_at_a_precision_is_that_precisions_solution():
    matmul = load_builtin(names=["level1/4_Matmul"])
    bf16 = load_references({"kind": "oracle", "backend": "cuda"}, matmul, "triton", precision="bf16")
    fp32 = load_references({"kind": "oracle", "backend": "cuda"}, matmul, "triton")
    assert "mma.sync" in bf16["level1/4_Matmul"].code and "mma.sync" not in fp32["level1/4_Matmul"].code
    # No cuda kernel takes fp16 (the oracle has no answer there); as a reference to port, the fp32 one serves.
    fp16 = load_references({"kind": "oracle", "backend": "cuda"}, matmul, "triton", precision="fp16")
    assert fp16["level1/4_Matmul"].code == fp32["level1/4_Matmul"].code


def test_same_backend_and_unknown_kind_are_errors():
    problems = load_builtin(names=["level1/1_ReLU"])
    with pytest.raises(ReferenceTransferError, match="is the target backend itself"):
        load_references({"kind": "oracle", "backend": "cpu"}, problems, "cpu")
    with pytest.raises(ConfigError, match="reference.kind must be one of"):  # a config error, named as such
        load_references({"kind": "telepathy"}, problems, "cpu")


def test_mlflow_reference_takes_the_fastest_correct_kernel(tmp_path):
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.create_experiment("cuda-runs", artifact_location=(tmp_path / "art").as_uri())
    for speed, code in ((1.5, "# slower kernel"), (3.0, "# fastest kernel")):
        rid = client.create_run(exp, tags={"kforge.kind": "problem", "backend": "cuda",
                                           "problem": "level1/1_ReLU"}).info.run_id
        client.log_metric(rid, "best_correct", 1.0)
        client.log_metric(rid, "best_speedup_eager", speed)
        client.log_text(rid, code, "best/kernel.py")
    problems = load_builtin(names=["level1/1_ReLU", "level1/2_Softmax"])
    refs = load_references({"kind": "mlflow", "backend": "cuda", "experiment": "cuda-runs"}, problems, "triton",
                           f"sqlite:///{tmp_path}/mlflow.db")
    assert refs["level1/1_ReLU"].code == "# fastest kernel" and refs["level1/1_ReLU"].source.startswith("mlflow:")
    assert refs["level1/2_Softmax"] is None
    with pytest.raises(ReferenceTransferError, match="no MLflow experiment named 'nope'"):
        load_references({"kind": "mlflow", "backend": "cuda", "experiment": "nope"}, problems, "triton",
                        f"sqlite:///{tmp_path}/mlflow.db")


def test_any_backend_is_a_source_for_any_other():
    from kforge.job.reference import transfer_pairs
    problems = load_builtin(names=["level1/1_ReLU", "level1/4_Matmul"])
    refs = load_references({"kind": "oracle", "backend": "opencl"}, problems, "triton")
    assert refs["level1/4_Matmul"].backend == "opencl" and "__kernel" in refs["level1/4_Matmul"].code
    assert transfer_pairs(["cpu", "opencl"], ["opencl", "triton"]) == [("cpu", "opencl"), ("cpu", "triton"),
                                                                      ("opencl", "triton")]
    with pytest.raises(ReferenceTransferError, match="unknown backend 'metal'"):
        transfer_pairs(["metal"], ["cpu"])
    with pytest.raises(ConfigError, match="reference.backend must be auto or a backend"):
        load_references({"kind": "oracle", "backend": "metal"}, problems, "cpu")


def test_in_the_backward_mode_the_oracle_reference_is_a_training_steps_kernel():
    problems = load_builtin(names=["level1/1_ReLU", "level1/6_Conv2d"], size="cpu")
    refs = load_references({"kind": "oracle", "backend": "auto"}, problems, "cpu", backward=True)
    assert "torch.autograd.Function" in refs["level1/1_ReLU"].code and refs["level1/6_Conv2d"] is None
