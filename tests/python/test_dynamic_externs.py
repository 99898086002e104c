"""Externs with symbolic arguments: a convolution whose padding and stride
are computed from the input's length is one symbolic compile for every
length — the runtime evaluates the node's size arguments for each call's
sizes before torch's kernel (ptc.compile) or ptc's C kernel (ptc-run) runs
it. On main the convolution's meta refused a symbolic stride or padding and
every new length recompiled with static sizes."""
import os

import pytest

import ptcio

torch = pytest.importorskip("torch")
F = torch.nn.functional

import ptc  # noqa: E402

SRC = os.environ.get("PTC_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")


@pytest.fixture(autouse=True)
def _reset():
    ptc.reset()


def events(compiled, kind):
    handle = getattr(compiled, "_ptc_compiled", compiled)
    return [e for e in handle._events() if e["kind"] == kind]


def conv_from_length(x, w):
    L = x.size(-1)
    return torch.relu(F.conv1d(x, w, padding=L // 4 + 1, stride=L // 8 + 1))


def conv2d_dilated(x, w):
    return F.conv2d(x, w, padding=x.size(2) // 2, dilation=x.size(2) // 4 + 1)


LENGTHS = (8, 12, 20, 33, 64)


def test_conv_size_arguments_compile_once_under_automatic_dynamic():
    w = torch.randn(4, 3, 3)
    c = ptc.compile(conv_from_length)
    for L in LENGTHS:
        x = torch.randn(2, 3, L)
        torch.testing.assert_close(c(x, w), conv_from_length(x, w), rtol=1e-4, atol=1e-4)
    assert not events(c, "static_fallback"), events(c, "static_fallback")
    assert len(events(c, "compile")) == 2, [e["reason"] for e in events(c, "compile")]


def test_conv_size_arguments_with_mark_dynamic():
    w = torch.randn(5, 2, 3, 3)
    c = ptc.compile(conv2d_dilated)
    for H in (8, 13, 24):
        x = torch.randn(1, 2, H, 9)
        ptc.mark_dynamic(x, 2)
        torch.testing.assert_close(c(x, w), conv2d_dilated(x, w), rtol=1e-4, atol=1e-4)
    assert not events(c, "static_fallback"), events(c, "static_fallback")
    assert len(events(c, "compile")) == 1, [e["reason"] for e in events(c, "compile")]


def test_ptc_run_binds_extern_arguments_per_size():
    path = os.path.join(SRC, "tests", "data", "dynamic_args", "conv_size_args.ptir")
    r = ptcio.ptc_run("--backend", "cpu", "--check", "--stats", "--sym", "s0=8,13,40", path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert r.stdout.count("outputs match the reference") == 3, r.stdout
    assert r.stdout.count("reused (one program for every size)") == 2, r.stdout
