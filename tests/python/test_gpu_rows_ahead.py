"""Row kernels under the row-mode options against the reference and eager
torch: rows ahead (PTC_CUDA_ROW_AHEAD, plan.c's row_ahead, kernel.c's
emit_rows_ahead) and row-long locals kept in registers (PTC_CUDA_ROW_FORWARD,
cuda/body.c's row_forwarded).

With rows ahead a team of a softmax or layer_norm kernel issues the loads of
the row it runs next before the current row's work and carries them to the
next iteration; the launch gives each team several rows
(PTC_CUDA_ROW_AHEAD_ROWS). With forwarding a lane keeps softmax's
exponentials (a local the sum and the division read) in registers. The cases
reach their edges: bf16 rows of 768 and 1024 (the kernel table's), rows whose
length leaves the last lanes' chunk out (1000, 700), row counts that are no
multiple of the teams a launch has (4099, 33: a team's last row has no
next), fewer rows than teams (5), f16, and f32 under =2. Each runs through
`ptc-run --backend cuda --check` (every output against the reference
interpreter) and, for the kernel table's shapes, under ptc.compile against
eager torch. Without a GPU they skip with ptc's reason.
"""
import os
import subprocess

import pytest
import torch

import ptc
from gpucheck import cuda_reason
from ptcio import build_dir


@pytest.fixture(autouse=True)
def _gpu():
    reason = cuda_reason()
    if reason:
        pytest.skip(reason)


AHEAD = [{"PTC_CUDA_ROW_AHEAD": "1"}, {"PTC_CUDA_ROW_AHEAD": "1", "PTC_CUDA_ROW_AHEAD_ROWS": "2"},
         {"PTC_CUDA_ROW_AHEAD": "2", "PTC_CUDA_ROW_AHEAD_ROWS": "8"}, {"PTC_CUDA_ROW_FORWARD": "1"},
         {"PTC_CUDA_ROW_FORWARD": "1", "PTC_CUDA_ROW_AHEAD": "2"}]

SHAPES = [("bf16", 4096, 768), ("bf16", 2048, 1024), ("bf16", 4099, 1000), ("bf16", 33, 768),
          ("bf16", 5, 1024), ("f16", 1000, 700), ("f32", 4099, 768), ("f32", 33, 1024)]


def check(tmp_path, name, body, params, env):
    text = "# ptc ir v1\ngraph %s(%s) {\n%s\n}\n" % (name, params, body)
    path = tmp_path / (name + ".ptir")
    path.write_text(text)
    e = dict(os.environ, PTC_CACHE_DIR=str(tmp_path / "cache"), **env)
    r = subprocess.run([os.path.join(build_dir(), "tools", "run", "ptc-run"), "--backend", "cuda",
                        "--check", "--seed", "3", str(path)],
                       capture_output=True, text=True, timeout=300, env=e)
    assert r.returncode == 0 and "match the reference" in r.stdout, \
        "%s (env %s)\n%s\n%s\n%s" % (name, env, text, r.stdout[-2000:], r.stderr[-2000:])


@pytest.mark.parametrize("env", AHEAD, ids=lambda e: "-".join(e.values()))
@pytest.mark.parametrize("dt,rows,cols", SHAPES)
def test_rows_ahead_match_the_reference(tmp_path, env, dt, rows, cols):
    ty = "%s[%d,%d]" % (dt, rows, cols)
    check(tmp_path, "softmax", "  %%s = softmax(%%x, -1) : %s\n  return (%%s)" % ty,
          "%%x: %s cpu" % ty, env)
    check(tmp_path, "layer_norm",
          "  %%l = layer_norm(%%x, [%d], %%w, %%b) : %s\n  return (%%l)" % (cols, ty),
          "%%x: %s cpu, %%w: %s[%d] cpu, %%b: %s[%d] cpu" % (ty, dt, cols, dt, cols), env)
    # two row kernels in one launch (a horizontal combination), one of them a
    # softmax whose output is read again by a sum
    check(tmp_path, "combined",
          "  %%s = softmax(%%x, -1) : %s\n  %%p = mul(%%s, %%x) : %s\n"
          "  %%e = sum(%%p, [1]) : %s[%d]\n  %%l = log_softmax(%%x, -1) : %s\n"
          "  %%v = std(%%x, [1]) : %s[%d]\n  return (%%s, %%e, %%l, %%v)"
          % (ty, ty, dt, rows, ty, dt, rows), "%%x: %s cpu" % ty, env)


def softmax(x):
    return torch.softmax(x, -1)


def layer_norm(x, w, b):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)


@pytest.mark.parametrize("ahead,forward", [("0", "0"), ("1", "0"), ("0", "1"), ("1", "1")])
def test_kernel_table_shapes_equal_eager(tmp_path, monkeypatch, ahead, forward):
    """bench/gpu/run.py's bf16 softmax [32768,1024] and layer_norm
    [32768,768], compiled with and without each option, against eager."""
    monkeypatch.setenv("PTC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PTC_CUDA_ROW_AHEAD", ahead)
    monkeypatch.setenv("PTC_CUDA_ROW_FORWARD", forward)
    torch.manual_seed(0)
    x = torch.randn(32768, 1024, device="cuda", dtype=torch.bfloat16)
    got = ptc.compile(softmax)(x)
    torch.testing.assert_close(got.float(), softmax(x).float(), rtol=2e-2, atol=1e-3)
    x = torch.randn(32768, 768, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(768, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(768, device="cuda", dtype=torch.bfloat16)
    got = ptc.compile(layer_norm)(x, w, b)
    torch.testing.assert_close(got.float(), layer_norm(x, w, b).float(), rtol=2e-2, atol=5e-2)
