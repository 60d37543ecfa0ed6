from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kernels import Kernel, KernelFactory


@pytest.fixture
def kernels(tmp_path: Path) -> Iterator[KernelFactory]:
    """Start real kernels that share a Jupyter data dir (one signing key, one store)."""
    factory = KernelFactory(tmp_path)
    yield factory
    factory.close()


@pytest.fixture
def kernel(kernels: KernelFactory) -> Kernel:
    """One kernel with ``%load_ext kernel_hooks`` done."""
    return kernels.start()
