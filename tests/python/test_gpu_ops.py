"""The CUDA backend against the reference interpreter and torch, op by op.

Every case of test_cpu_backend.py (each op of ops.def with a lowering, on
random shapes, dtypes, strides, broadcasts, size-1 and empty dims) runs here
through `ptc-run --backend cuda --check`, so each op's generated CUDA kernel
is compared with the reference interpreter and its saved outputs with torch.
Without a GPU every test skips with ptc's own reason.
"""
import pytest

import test_cpu_backend as cases
from gpucheck import require_gpu

cases.BACKEND = "cuda"
workdir = cases.workdir


@pytest.fixture(autouse=True)
def _gpu():
    require_gpu()


for _name in dir(cases):
    if _name.startswith("test_"):
        globals()[_name] = getattr(cases, _name)
