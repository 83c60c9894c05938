"""Two tiny models sharing a task, as `file.py:factory` specs for warm tests."""

import torch


def _mlp(out: int, seed: int) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, out)).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return m, (torch.randn(4, 32, generator=g),)


def model_a():
    return _mlp(16, 0)


def model_b():
    return _mlp(8, 1)
