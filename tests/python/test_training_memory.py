"""Memory under a compiled training step on the CPU: the C heap keeps the
gradients' pages from one step to the next (compiler/runtime/heap.c), so a
backward does not fault them in again, and the forward saves each value the
backward needs once."""
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402
from test_training import compiled_autograd  # noqa: E402,F401

# A fresh process: glibc's thresholds depend on what the process freed before.
HEAP_SCRIPT = textwrap.dedent("""
    import resource, sys
    import torch, ptc
    ptc.config.compiled_autograd = True
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                            torch.nn.Linear(8 * 6 * 6, 4))
    c = ptc.compile(m)
    x = torch.randn(2, 3, 8, 8)
    {train}
    assert ptc.explain(m, backend="ptc")(x).graph_count == 1

    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    # resnet18's step in small: one 9 MiB weight gradient unmapped sets glibc's
    # trim threshold to 18 MiB; then three such gradients allocated while the
    # saved tensors live, touched, and freed together by zero_grad.
    big = 9 << 20
    w = torch.empty(big // 4).fill_(1.0)
    del w
    counts = []
    for step in range(4):
        f0 = faults()
        grads = [torch.empty(big // 4).fill_(1.0) for _ in range(3)]
        del grads
        counts.append(faults() - f0)
    print(max(counts[1:]))
""")


def heap_faults(train):
    r = subprocess.run([sys.executable, "-c", HEAP_SCRIPT.format(train=train)],
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr[-2000:]
    return int(r.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_gradients_pages_stay_mapped_between_steps():
    # main: ~6,900 faults a step (27 MiB trimmed at zero_grad and faulted back)
    pages = 3 * (9 << 20) // 4096
    assert heap_faults("c(x).sum().backward()") < pages // 10


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_user_who_tuned_malloc_is_left_alone():
    env = dict(os.environ, MALLOC_TRIM_THRESHOLD_="1048576", MALLOC_MMAP_THRESHOLD_="33554432")
    script = HEAP_SCRIPT.format(train="c(x).sum().backward()")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=600, env=dict(env, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr[-2000:]
    # their 1 MiB trim threshold still gives the pages back each step
    assert int(r.stdout.split()[-1]) > 3 * (9 << 20) // 4096 // 2
