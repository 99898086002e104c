"""On CUDA a training step's forward and backward make their PTX in one
compile worker and load it on one pool of threads (ptc_cuda_prepare_all;
skipped without a GPU): a cold compile forks once for the kernels of both
halves, and the gradients match eager's, as they do with PTC_COMPILE_WORKER=0
(PTX made in the process, by the loading threads)."""
import json
import os
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

SCRIPT = r"""
import json, torch, ptc
ptc.config.compiled_autograd = True
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.BatchNorm2d(16), torch.nn.GELU(),
                        torch.nn.Flatten(), torch.nn.Linear(16 * 14 * 14, 10)).cuda().train()
x = torch.randn(4, 3, 16, 16, device="cuda")
ptc.compile(m)(x).square().sum().backward()
got = [p.grad.clone() for p in m.parameters()]
for p in m.parameters():
    p.grad = None
m(x).square().sum().backward()
# against the largest gradient of all: the conv's bias, which BatchNorm
# cancels, has a gradient of rounding noise only (about 1e-9)
scale = max(p.grad.abs().max().item() for p in m.parameters())
err = max((a - p.grad).abs().max().item() for a, p in zip(got, m.parameters())) / scale
print(json.dumps(dict(err=err)))
"""


def run(tmp_path, worker):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    env = {k: v for k, v in os.environ.items() if k not in ("PTC_COMPILE_WORKER", "PTC_INJECT")}
    env.update(PTC_CACHE_DIR=str(tmp_path / ("cache" + (worker or ""))), PTC_LOGS="perf")
    if worker is not None:
        env["PTC_COMPILE_WORKER"] = worker
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.splitlines()[-1]), r.stderr


def test_a_cold_training_compile_forks_once_for_both_halves(tmp_path):
    out, log = run(tmp_path, None)
    workers = [l for l in log.splitlines() if "compile workers:" in l]
    assert len(workers) == 1 and "1 fork(s)" in workers[0], workers
    assert int(re.search(r"(\d+) item\(s\)", workers[0]).group(1)) >= 2, workers
    assert out["err"] < 1e-3, out["err"]
    alone, log0 = run(tmp_path, "0")
    assert not [l for l in log0.splitlines() if "compile workers:" in l]
    assert alone["err"] < 1e-3, alone["err"]
