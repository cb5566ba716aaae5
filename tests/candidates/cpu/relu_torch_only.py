# Correct, but pure PyTorch: no kernel, so the kernel-presence rule rejects it when switched on.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp_min(x, 0.0)
