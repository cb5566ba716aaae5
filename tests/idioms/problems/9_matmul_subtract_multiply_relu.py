"""A linear layer, minus a constant, times a constant, then ReLU: at these sizes the shift sends every value below
zero, so the answer is all zeros for every input (a problem of KernelBench's level 2 has this shape). Idioms on it
(``# problem-file:``) prove that an honest kernel whose writes equal its output's zero fill is not called a cheat."""
import torch
import torch.nn as nn

batch_size = 1024
in_features = 8192
out_features = 8192
subtract_value = 2.0
multiply_value = 1.5

KFORGE = {
    "sizes": {
        "cpu": {"batch_size": 64, "in_features": 256, "out_features": 256},
        "gpu": {"batch_size": 1024, "in_features": 8192, "out_features": 8192},
    },
    "ops": ["linear", "Linear", "addmm", "matmul", "mm", "relu", "ReLU", "clamp", "clamp_min"],
}


class Model(nn.Module):
    def __init__(self, in_features, out_features, subtract_value, multiply_value):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.subtract_value = subtract_value
        self.multiply_value = multiply_value

    def forward(self, x):
        x = self.linear(x)
        x = x - self.subtract_value
        x = x * self.multiply_value
        return torch.relu(x)


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, subtract_value, multiply_value]
