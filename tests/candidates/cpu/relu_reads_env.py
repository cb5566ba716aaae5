# Returns a wrong answer if it can see secrets or the caller's working directory.
import os

import torch
import torch.nn as nn

LEAKS = [k for k in os.environ if "KEY" in k or "TOKEN" in k]
CWD = os.getcwd()


class ModelNew(nn.Module):
    def forward(self, x):
        if LEAKS:
            raise RuntimeError(f"saw secrets: {LEAKS}")
        if "kforge-pool" not in CWD and "work" not in CWD:
            raise RuntimeError(f"runs in {CWD}")
        return torch.clamp_min(x, 0.0)
