"""The CPU stand-ins for device factories: the same tensor on the CPU, named, and only inside the block."""

from __future__ import annotations

import torch

from harness.suite import standins
from harness.suite.standins.cuda import STANDIN_CUDA_FACTORY, cpu_cuda_factories


def test_factories_asked_for_cuda_make_the_same_tensor_on_the_cpu_inside_the_block_only() -> None:
    original = torch.zeros
    with cpu_cuda_factories(pin=True):
        zero = torch.zeros(1, dtype=torch.int32, device="cuda")
        torch.manual_seed(0)
        drawn = torch.rand(size=(3,), device=torch.device("cuda"))
        kept = torch.ones(2)  # no device asked: untouched
    torch.manual_seed(0)
    assert zero.device.type == "cpu" and zero.dtype == torch.int32 and zero.tolist() == [0]
    assert torch.equal(drawn, torch.rand(size=(3,)))  # the same draw as on the CPU
    assert kept.device.type == "cpu"
    assert STANDIN_CUDA_FACTORY in standins.used()
    assert torch.zeros is original  # restored after the block
