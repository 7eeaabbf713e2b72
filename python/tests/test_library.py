"""The library's metadata and memory control through the C ABI."""
import pytest

import gna
from conftest import torch


def test_abi_version():
    assert gna.abi_version() == 7  # 7: per-batch counts of additional keys


def test_release_cached_memory_without_gpu_work_is_a_no_op():
    gna.release_cached_memory()


@pytest.mark.skipif(torch is None or not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_release_cached_memory_after_a_backward():
    q, k, v = (torch.randn(1, 64, 64, 2, 64, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))
    gna.na2d(q, k, v, kernel_size=9).sum().backward()
    gna.release_cached_memory()
    gna.na2d(q, k, v, kernel_size=9).sum().backward()  # allocates again
    torch.cuda.synchronize()
    assert torch.isfinite(q.grad).all()
