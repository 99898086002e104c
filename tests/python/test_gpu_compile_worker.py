"""The CUDA backend's PTX comes from one compile worker per compile (skipped
without a GPU): a small convolutional net compiled cold with the default
settings forks once for all its kernels, a warm start forks none, and the
results equal PTC_COMPILE_WORKER=0's and eager's."""
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

SCRIPT = r"""
import json, sys, time, torch, ptc
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                        torch.nn.Conv2d(16, 8, 3), torch.nn.GELU(), torch.nn.Flatten(),
                        torch.nn.LazyLinear(10)).cuda().eval()
x = torch.randn(4, 3, 32, 32, device="cuda")
with torch.no_grad():
    want = m(x)
    t0 = time.perf_counter()
    got = ptc.compile(m)(x)
    torch.cuda.synchronize()
print(json.dumps(dict(first_call_s=time.perf_counter() - t0,
                      err=(got - want).abs().max().item(), out=got.flatten().tolist())))
"""


def _needs_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")


def run(tmp_path, worker=None):
    script = tmp_path / "net.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("PTC_COMPILE_WORKER", "PTC_INJECT")}
    env.update(PTC_CACHE_DIR=str(tmp_path / ("cache" + (worker or ""))), PTC_LOGS="perf")
    if worker is not None:
        env["PTC_COMPILE_WORKER"] = worker
    r = subprocess.run([sys.executable, "-W", "ignore", str(script)], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    said = [l for l in r.stderr.splitlines() if "compile workers:" in l]
    return json.loads(r.stdout.strip().splitlines()[-1]), said


def test_one_fork_per_compile_and_the_same_results(tmp_path):
    _needs_cuda()
    cold, said = run(tmp_path)
    assert cold["err"] < 1e-3, cold["err"]
    assert said and all(" 1 fork(s)" in l for l in said), said  # one per graph compiled
    warm, said = run(tmp_path)
    assert said == [] and warm["out"] == cold["out"], said
    inproc, said = run(tmp_path, "0")
    assert said == [], said
    assert inproc["out"] == cold["out"]
