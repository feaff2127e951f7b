"""A user's script, run by ci/test_torch_range.sh on each PyTorch release it tests.

A small 3-D conv net with trilinear upsampling, trained three steps: with
PyTorch's kernels, with ``trilinear_bwd.torch.enable()``, and compiled with
``torch.compile`` under ``enable()``.  The losses of the three runs must agree
(within float rounding), and the enabled runs must have used this library's
kernels.  Prints one line per run and ``ok``.
"""

import copy
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import trilinear_bwd.torch as tbt


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.down = nn.Conv3d(2, 8, 3, stride=2, padding=1)
        self.mid = nn.Conv3d(8, 8, 3, padding=1)
        self.out = nn.Conv3d(8, 2, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.down(x))
        y = torch.relu(self.mid(y))
        y = F.interpolate(y, scale_factor=2, mode="trilinear", align_corners=False)
        return self.out(y)


def train(model, compiled=False, steps=3):
    torch.manual_seed(1)
    step_model = torch.compile(model) if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        x = torch.randn(2, 2, 16, 16, 16)
        loss = (step_model(x) - x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    torch.manual_seed(0)
    base = Net()
    runs = {"pytorch": train(copy.deepcopy(base))}
    before = tbt.call_counts()["kernel"]
    with tbt.enabled():
        runs["enable()"] = train(copy.deepcopy(base))
        eager_kernels = tbt.call_counts()["kernel"] - before
        runs["enable() + torch.compile"] = train(copy.deepcopy(base), compiled=True)
    compiled_kernels = tbt.call_counts()["kernel"] - before - eager_kernels
    for name, losses in runs.items():
        print(f"{name:26s} losses {' '.join(f'{v:.6f}' for v in losses)}")
    print(f"torch {torch.__version__}: this library's backward ran {eager_kernels} times eager, "
          f"{compiled_kernels} times compiled")
    ok = (eager_kernels == 3 and compiled_kernels == 3
          and all(abs(a - b) <= 1e-4 * max(1.0, abs(a))
                  for losses in runs.values() for a, b in zip(runs["pytorch"], losses)))
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
