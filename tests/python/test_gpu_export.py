"""ptc.export packages run on the GPU from C: the package's PTX (generated
when it was saved, for sm_80 and sm_90) is what ptc-run --package --backend
cuda loads — the load compiles no kernel — and the outputs match eager's on
the CPU. Skips without ptc's CUDA backend (no driver or GPU)."""
import os
import re
import struct

import pytest

torch = pytest.importorskip("torch")
ptc = pytest.importorskip("ptc", reason="the ptc Python module is not part of this build")

import ptcio  # noqa: E402
from gpucheck import require_gpu  # noqa: E402
from models_common import rel_error  # noqa: E402
from test_export import Block, eager_leaves, user_inputs  # noqa: E402

TOL = 1e-3


@pytest.fixture(autouse=True)
def _gpu(tmp_path, monkeypatch):
    require_gpu()
    monkeypatch.setenv("PTC_CACHE_DIR", str(tmp_path / "cache"))


def run_on_gpu(model, args, tmp_path, **kw):
    model.eval()
    ep = ptc.export(model, args, **kw)
    pkg = ep.save(tmp_path / "pkg", targets=("cpu", "sm_80", "sm_90"))
    ptcio.write_tensors(tmp_path / "in.bin", user_inputs(ep, args))
    r = ptcio.ptc_run("--package", pkg, "--backend", "cuda", "--inputs", tmp_path / "in.bin",
                      "--save-outputs", tmp_path / "out.bin", "--stats", timeout=600)
    assert r.returncode == 0, r.stderr
    assert re.search(r"kernels compiled at load: 0\b", r.stdout), r.stdout
    got = dict(ptcio.read_tensors(tmp_path / "out.bin"))
    for path, want in eager_leaves(model, args):
        assert rel_error(got[path], want) <= TOL, path


def test_block_package_on_the_gpu(tmp_path):
    torch.manual_seed(0)
    run_on_gpu(Block(), (torch.randn(6, 8),), tmp_path,
               dynamic_shapes={"x": {0: ptc.Dim("batch", max=64)}})


def test_resnet18_package_on_the_gpu(tmp_path):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    run_on_gpu(torchvision.models.resnet18(num_classes=10), (torch.randn(2, 3, 64, 64),), tmp_path)


class ColumnSum(torch.nn.Module):
    """A reduction whose launch plan depends on the GPU's multiprocessor
    count (2000 strided columns: a team per column on 132 SMs, a warp's share
    on 114 or 78)."""

    def forward(self, x):
        return (x * 2).sum(0)


def test_package_ptx_serves_this_gpus_multiprocessor_count(tmp_path):
    """The package holds PTX planned for each data-centre GPU of its arch, so
    loading generates none on an A100/A30 or H100 SXM/PCIe/H200/H20."""
    torch.manual_seed(0)
    run_on_gpu(ColumnSum(), (torch.randn(4096, 2000),), tmp_path)


def test_loaded_package_module_runs_cuda_inputs(tmp_path):
    """ptc.load(pkg).module() of a package exported on the CPU, called with
    CUDA inputs, runs on the GPU (weights moved once, tensors the forward
    makes on the device) and matches eager; mixing devices is refused."""
    from test_export import Positions

    torch.manual_seed(0)
    model = Positions().eval()
    pkg = ptc.export(model, (torch.randn(3, 5),)).save(tmp_path / "pkg")
    m = ptc.load(pkg).module()
    x = torch.randn(3, 5)
    with torch.no_grad():
        want = model(x)
        got = m(x.cuda())
        again = m(x.cuda() * 2)
        assert rel_error(m(x), want) <= TOL  # the CPU still runs as exported
    assert rel_error(got.cpu(), want) <= TOL
    assert rel_error(again.cpu(), model(x * 2)) <= TOL
    block = ptc.export(Block().eval(), (torch.randn(4, 8),)).module()
    out = block(torch.randn(4, 8).cuda())
    assert out["h"].is_cuda and out["pair"][1].is_cuda


def test_loaded_package_module_runs_the_package_ptx(tmp_path, monkeypatch):
    """ptc.load(pkg).module() on CUDA inputs runs the PTX the package holds
    for this GPU's architecture: the moved graph's kernels have the same keys
    as the sealed ones, so the kernel cache gets no PTX, only the cubins the
    driver compiled from the package's PTX (the cache keeps those, as for
    any CUDA program: man ptc.7, PTC_CACHE_DIR)."""
    torch.manual_seed(0)
    model, x = Block().eval(), torch.randn(5, 8)
    pkg = ptc.export(model, (x,)).save(tmp_path / "pkg", targets=("cpu", "sm_80", "sm_90"))
    monkeypatch.setenv("PTC_CACHE_DIR", str(tmp_path / "empty_cache"))
    assert ptc._C._package_kernels(str(pkg), "cuda").startswith(str(pkg / "kernels" / "sm_"))
    with torch.no_grad():
        got = ptc.load(pkg).module()(x.cuda())
    assert got["h"].is_cuda and rel_error(got["h"].cpu(), eager_leaves(model, (x,))[0][1]) <= TOL
    cache = tmp_path / "empty_cache"
    keys = [cache_entry_key(cache / f) for f in os.listdir(cache)] if cache.exists() else []
    assert all("\ncubin sm_" in k for k in keys), keys  # no PTX was generated


def cache_entry_key(path):
    """The key a kernel cache file holds: "PTCK", u32 version, u32 key
    length, key (compiler/codegen/cache.c)."""
    data = path.read_bytes()
    assert data[:4] == b"PTCK", path
    (n,) = struct.unpack_from("<I", data, 8)
    return data[12:12 + n].decode()


def test_int_outputs_of_a_package_on_the_gpu(tmp_path):
    """An int computed from a dynamic size comes back from ptc-run --package
    --backend cuda as a 0-dim i64 tensor (on the host)."""
    from test_export import Rows

    ep = ptc.export(Rows(), (torch.randn(5, 3),), dynamic_shapes={"x": {0: ptc.Dim("n")}})
    pkg = ep.save(tmp_path / "pkg", targets=("sm_80", "sm_90"))
    ptcio.write_tensors(tmp_path / "in.bin", [("x", torch.randn(7, 3))])
    r = ptcio.ptc_run("--package", pkg, "--backend", "cuda", "--inputs", tmp_path / "in.bin",
                      "--save-outputs", tmp_path / "out.bin", timeout=600)
    assert r.returncode == 0, r.stderr
    got = dict(ptcio.read_tensors(tmp_path / "out.bin"))
    assert [got[k].item() for k in ("[2]", "[3]['cells']", "[3]['half']")] == [7, 22, 4]
    y, five, n, d = ptc.load(pkg).module()(torch.randn(6, 3).cuda())
    assert y.is_cuda and (five, n, d) == (5, 6, {"cells": 19, "half": 3})


def test_cuda_inputs_must_be_on_the_gpu_for_the_c_api(tmp_path):
    """ptc-run copies inputs to the GPU; the package itself was exported on
    the CPU, and its weights move to the device at load."""
    torch.manual_seed(0)
    ep = ptc.export(Block().eval(), (torch.randn(3, 8),))
    pkg = ep.save(tmp_path / "pkg", targets=("sm_90", "sm_80"))
    assert sorted(os.listdir(pkg / "kernels")) == ["sm_80", "sm_90"]
    ptcio.write_tensors(tmp_path / "in.bin", [("x", torch.randn(3, 8))])
    r = ptcio.ptc_run("--package", pkg, "--backend", "cuda", "--inputs", tmp_path / "in.bin")
    assert r.returncode == 0, r.stderr


class RowSums(torch.nn.Module):
    def forward(self, x):
        return x * 3, x.sum(1)


def test_package_runs_past_2_31_elements_on_its_own_64_bit_variant(tmp_path):
    """A package's kernels over symbolic sizes carry their 64-bit index
    variant: the loaded package's small calls run its 32-bit entries, a call
    over [3, 749 million] int8 elements (past 2^31) the 64-bit ones, read
    from the package, not generated where it runs (ptc._C._cuda_index_counts:
    wide_variants counts those generated); the results equal eager's."""
    ep = ptc.export(RowSums(), (torch.zeros(4, 100, dtype=torch.int8),),
                    dynamic_shapes={"x": {0: ptc.Dim("rows", max=16),
                                          1: ptc.Dim("cols", max=2**30)}})
    pkg = ep.save(tmp_path / "pkg", targets=("sm_80", "sm_90"))
    m = ptc.load(pkg).module()

    def check(rows, cols):
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randint(-128, 128, (rows, cols), dtype=torch.int8, device="cuda", generator=g)
        torch.cuda.synchronize()
        before = ptc._C._cuda_index_counts()
        y, s = m(x)
        torch.cuda.synchronize()
        after = ptc._C._cuda_index_counts()
        assert torch.equal(y, x * 3) and torch.equal(s, x.sum(1))
        return {k: after[k] - before[k] for k in before}

    d = check(3, 1000)
    assert d["launches_i32"] >= 1 and d["launches_i64"] == 0, d
    d = check(3, (2**31 + 100_000_000) // 3)
    assert d["launches_i64"] >= 1 and d["launches_i32"] == 0 and d["wide_variants"] == 0, d
    torch.cuda.empty_cache()
