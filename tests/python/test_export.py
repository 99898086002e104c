"""ptc.export: whole models exported as one graph, saved as packages, loaded
again (in a fresh Python process) and run from C with no Python in the process
(ptc-run --package and examples/export/run_model) — every output against eager
torch's, saved by the test. Inputs that break the exported specification and
corrupt or mismatched packages are refused with one line naming the check or
the file."""
import json
import os
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
ptc = pytest.importorskip("ptc", reason="the ptc Python module is not part of this build")

import ptcio  # noqa: E402
from models_common import rel_error  # noqa: E402
from ptc._export import flatten  # noqa: E402

TOL = 1e-4


def run_model_exe():
    return os.path.join(ptcio.build_dir(), "examples", "export", "run_model")


def eager_leaves(model, args, kwargs=None):
    with torch.no_grad():
        result = model(*args, **(kwargs or {}))
    leaves = []
    flatten(result, leaves)
    return leaves


def user_inputs(ep, args, kwargs=None):
    """The example call's tensors in the order the package takes them."""
    leaves = []
    flatten(tuple(args), leaves, "args")
    flatten(dict(kwargs or {}), leaves, "kwargs")
    return [(e["path"], leaves[e["leaf"]][1]) for e in ep.inputs]


def run_in_c(pkg, inputs, tmp_path, tool="run_model"):
    """Runs the package from C on inputs [(name, tensor)]; -> {path: tensor}."""
    ins, outs = tmp_path / "in.bin", tmp_path / ("out_%s.bin" % tool)
    ptcio.write_tensors(ins, inputs)
    if tool == "run_model":
        r = subprocess.run([run_model_exe(), str(pkg), str(ins), str(outs)], capture_output=True,
                           text=True, timeout=600)
    else:
        r = ptcio.ptc_run("--package", pkg, "--inputs", ins, "--save-outputs", outs, timeout=600)
    assert r.returncode == 0, r.stderr
    return dict(ptcio.read_tensors(outs))


def assert_matches(got, want_leaves, tol=TOL):
    assert list(got) == [p for p, _ in want_leaves]
    for path, want in want_leaves:
        err = rel_error(got[path], want)
        assert err <= tol, "%s: relative error %g" % (path, err)


def export_and_check(model, args, kwargs, tmp_path, tol=TOL, **kw):
    """Exports, checks module() against eager, saves, and runs the package from
    C with both programs."""
    model.eval()
    ep = ptc.export(model, args, kwargs, **kw)
    want = eager_leaves(model, args, kwargs)
    got = []
    with torch.no_grad():
        flatten(ep.module()(*args, **(kwargs or {})), got)
    assert_matches(dict(got), want, tol)
    pkg = tmp_path / "pkg"
    ep.save(pkg)
    for tool in ("run_model", "ptc-run"):
        assert_matches(run_in_c(pkg, user_inputs(ep, args, kwargs), tmp_path, tool), want, tol)
    return ep, pkg


class Block(torch.nn.Module):
    """A dict result holding a tuple, an input passed through and a constant."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 6)
        self.norm = torch.nn.LayerNorm(6)
        self.register_buffer("shift", torch.linspace(-1, 1, 6))

    def forward(self, x, scale=2.0):
        h = self.norm(torch.nn.functional.gelu(self.fc(x))) + self.shift
        return {"h": h, "pair": (h * scale, x), "tag": "block"}


def test_round_trip_in_a_fresh_process(tmp_path):
    torch.manual_seed(0)
    model, x = Block(), torch.randn(4, 8)
    ep, pkg = export_and_check(model, (x,), None, tmp_path)
    assert [e["kind"] for e in ep.spec["inputs"]] == ["user", "parameter", "parameter", "parameter",
                                                      "parameter", "buffer"]
    assert {e["path"] for e in ep.spec["inputs"]} >= {"fc.weight", "norm.bias", "shift"}
    assert sorted(os.listdir(pkg)) == ["graph.ptir", "kernels", "manifest.json", "spec.json",
                                       "weights.bin"]
    torch.save(x, tmp_path / "x.pt")
    script = ("import torch, ptc, sys\n"
              "m = ptc.load(sys.argv[1]).module()\n"
              "r = m(torch.load(sys.argv[2]))\n"
              "torch.save((r['h'], r['pair'][0], r['tag']), sys.argv[3])\n")
    subprocess.run([sys.executable, "-c", script, str(pkg), str(tmp_path / "x.pt"),
                    str(tmp_path / "r.pt")], check=True, timeout=600)
    h, scaled, tag = torch.load(tmp_path / "r.pt")
    with torch.no_grad():
        want = model(x)
    assert tag == "block"
    assert rel_error(h, want["h"]) <= TOL and rel_error(scaled, want["pair"][0]) <= TOL


def test_weights_are_aligned_for_mapping(tmp_path):
    """weights.bin is a version-2 tensor file: each tensor's bytes start at a
    multiple of 64, so the loader maps the file and runs on it in place;
    Python reads it back equal."""
    import struct
    from ptc import _tensorfile

    torch.manual_seed(0)
    ep = ptc.export(Block().eval(), (torch.randn(4, 8),))
    pkg = ep.save(tmp_path / "pkg")
    data = (pkg / "weights.bin").read_bytes()
    assert data[:4] == b"PTCT" and struct.unpack_from("<II", data, 4) == (2, len(ep.weights))
    manifest = json.loads((pkg / "manifest.json").read_text())
    pin = manifest["files"]["weights.bin"]  # its size and the XXH64 of each 4 MiB chunk
    assert (pin["bytes"], pin["chunk_bytes"], len(pin["xxh64"])) == (len(data), 4 << 20, 1)
    assert re.fullmatch(r"[0-9a-f]{16}", pin["xxh64"][0])
    pos = 12
    for name, t in _tensorfile.read_tensors(pkg / "weights.bin"):
        pos += 4 + len(name.encode()) + 4 + 16 * t.dim() + 8  # name, dtype..., sizes, strides
        assert data[pos:pos + -pos % 64] == bytes(-pos % 64), name  # zero padding
        pos += -pos % 64
        assert data[pos:pos + t.numel() * 4] == t.contiguous().numpy().tobytes(), name
        pos += t.numel() * 4
        assert torch.equal(t, ep.weights[name])
    assert pos == len(data) - 4


class Positions(torch.nn.Module):
    """Tensors made inside the forward (on the input's device)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(5, 5)

    def forward(self, x):
        pos = torch.arange(x.shape[-1], device=x.device, dtype=x.dtype)
        return self.fc(x * pos + torch.ones(x.shape[-1], device=x.device))


def test_a_cpu_export_compiles_for_cuda_inputs(tmp_path):
    """module() runs a program exported on the CPU on CUDA inputs by moving
    its inputs and the tensors it makes to the device: the moved graph
    generates PTX here (no GPU is needed); test_gpu_export runs it."""
    ep = ptc.export(Positions().eval(), (torch.randn(3, 5),))
    assert "device=cpu" in ep.graph_text
    moved = ptc._export.on_device(ep.graph_text, "cuda:0")
    assert not re.search(r"[(,=\s]cpu[,)]", moved.replace('"', " ").split("@")[0]), moved
    assert "%x: f32[3,5] cuda:0" in moved and "device=cuda:0" in moved
    (tmp_path / "moved.ptir").write_text(moved)
    r = ptcio.ptc_run("--emit=ptx", "--cuda-arch", "sm_90", tmp_path / "moved.ptir")
    assert r.returncode == 0 and ".entry" in r.stdout, r.stderr


def test_a_transposed_input_runs_as_eager(tmp_path):
    torch.manual_seed(0)
    model = Block().eval()
    ep = ptc.export(model, (torch.randn(8, 4).t(),))
    pkg = ep.save(tmp_path / "pkg")
    x = torch.randn(8, 4).t()
    assert_matches(run_in_c(pkg, [("x", x)], tmp_path), eager_leaves(model, (x,)))


def test_a_loaded_package_runs_its_own_kernels(tmp_path, monkeypatch):
    """ptc.load(pkg).module() compiles the graph as the C loader does, from
    the package's kernels/cpu (kernels/sm_XX on a GPU: test_gpu_export):
    nothing is generated, so nothing lands in the kernel cache."""
    torch.manual_seed(0)
    model, x = Block().eval(), torch.randn(4, 8)
    pkg = ptc.export(model, (x,)).save(tmp_path / "pkg")
    monkeypatch.setenv("PTC_CACHE_DIR", str(tmp_path / "cache"))
    got = ptc.load(pkg).module()(x)
    assert rel_error(got["h"], eager_leaves(model, (x,))[0][1]) <= TOL
    assert not os.path.exists(tmp_path / "cache") or os.listdir(tmp_path / "cache") == []
    assert ptc._C._package_kernels(str(pkg), "cpu") == str(pkg / "kernels" / "cpu")


def test_c_program_has_no_python():
    r = subprocess.run(["ldd", run_model_exe()], capture_output=True, text=True)
    assert r.returncode == 0 and "python" not in r.stdout.lower(), r.stdout


def test_dynamic_batch_and_refused_inputs(tmp_path):
    torch.manual_seed(0)
    model = Block().eval()
    batch = ptc.Dim("batch", min=2, max=16)
    ep = ptc.export(model, (torch.randn(4, 8),), dynamic_shapes={"x": {0: batch}})
    assert ep.spec["symbols"] == [{"symbol": "s0", "dim": "batch", "min": 2, "max": 16}]
    pkg = ep.save(tmp_path / "pkg")
    for n in (2, 7, 16):
        x = torch.randn(n, 8)
        assert_matches(run_in_c(pkg, [("x", x)], tmp_path), eager_leaves(model, (x,)))
        assert rel_error(ep.module()(x)["h"], eager_leaves(model, (x,))[0][1]) <= TOL
    bad = {"size 17 of dynamic dim 'batch' (s0) is outside its exported range [2, 16]":
           torch.randn(17, 8),
           "expected dtype f32, got f64": torch.randn(4, 8, dtype=torch.float64),
           "expected 2 dims, got 3": torch.randn(4, 8, 1),
           "dim 1 is 9, expected 8": torch.randn(4, 9)}
    for message, x in bad.items():
        with pytest.raises(ptc.ExportError, match=message.replace("(", r"\(").replace(")", r"\)")
                           .replace("[", r"\[").replace("]", r"\]")):
            ep.module()(x)
        ptcio.write_tensors(tmp_path / "bad.bin", [("x", x)])
        r = ptcio.ptc_run("--package", pkg, "--inputs", tmp_path / "bad.bin")
        assert r.returncode == 2 and message in r.stderr and r.stdout == "", r.stderr
        r = subprocess.run([run_model_exe(), str(pkg), str(tmp_path / "bad.bin"),
                            str(tmp_path / "o.bin")], capture_output=True, text=True)
        assert r.returncode == 1 and message in r.stderr, r.stderr


def test_torch_export_dims_are_accepted():
    export = pytest.importorskip("torch.export")
    if not hasattr(export, "Dim"):
        pytest.skip("torch %s has no torch.export.Dim" % torch.__version__)
    ep = ptc.export(torch.nn.Linear(4, 3).eval(), (torch.randn(5, 4),),
                    dynamic_shapes=({0: export.Dim("rows", min=1, max=100)},))
    assert ep.spec["symbols"] == [{"symbol": "s0", "dim": "rows", "min": 2, "max": 100}]
    assert ep.module()(torch.randn(37, 4)).shape == (37, 3)


def test_one_dim_on_two_inputs_must_agree(tmp_path):
    class Pair(torch.nn.Module):
        def forward(self, a, b):
            return a.sum(1) * 2, b.mean(1)

    n = ptc.Dim("n", max=32)
    ep = ptc.export(Pair(), (torch.randn(4, 3), torch.randn(4, 5)),
                    dynamic_shapes={"a": {0: n}, "b": {0: n}})
    pkg = ep.save(tmp_path / "pkg")
    a, b = torch.randn(6, 3), torch.randn(6, 5)
    assert_matches(run_in_c(pkg, [("a", a), ("b", b)], tmp_path), eager_leaves(Pair(), (a, b)))
    assert [r["symbol"] for r in ep.spec["symbols"]] == ["s0"]  # one Dim, one symbol
    message = "dim 0 is 7, expected s0 (= 6)"
    with pytest.raises(ptc.ExportError, match=re.escape(message)):
        ep.module()(a, torch.randn(7, 5))
    ptcio.write_tensors(tmp_path / "bad.bin", [("a", a), ("b", torch.randn(7, 5))])
    r = ptcio.ptc_run("--package", pkg, "--inputs", tmp_path / "bad.bin")
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_one_dim_with_two_example_sizes_is_an_error():
    n = ptc.Dim("n")
    with pytest.raises(ptc.ExportError, match="dynamic dim 'n' is 4 in input1 and 5 in input2"):
        ptc.export(torch.nn.Bilinear(1, 1, 1), (torch.randn(4, 1), torch.randn(5, 1)),
                   dynamic_shapes={"input1": {0: n}, "input2": {0: n}})


def test_different_dims_with_equal_example_sizes_warn():
    class Pair(torch.nn.Module):
        def forward(self, a, b):
            return a * 2, b + 1

    with pytest.warns(UserWarning, match="dynamic dims 'n' and 'm' had the same size"):
        ptc.export(Pair(), (torch.randn(4), torch.randn(4)),
                   dynamic_shapes={"a": {0: ptc.Dim("n")}, "b": {0: ptc.Dim("m")}})


def test_dynamic_dim_specialised_is_an_error():
    class Halves(torch.nn.Module):
        def forward(self, x):
            return x.view(x.shape[0] // 2, -1) * 2

    with pytest.raises(ptc.ExportError, match=r"dim 0 of x \(batch\) was asked to be dynamic, but the trace specialised it to 6; view"):
        ptc.export(Halves(), (torch.randn(6, 4),), dynamic_shapes={"x": {0: ptc.Dim("batch")}})


class Rows(torch.nn.Module):
    """Ints computed from a dynamic size beside a constant int of the same
    value in the example call (5), in a tuple and a dict."""

    def forward(self, x):
        n = x.shape[0]
        return x * 2, 5, n, {"cells": n * x.shape[1] + 1, "half": (n + 1) // 2}


def test_int_outputs_computed_from_dynamic_sizes(tmp_path):
    ep = ptc.export(Rows(), (torch.randn(5, 3),), dynamic_shapes={"x": {0: ptc.Dim("n")}})
    assert [o.get("symint") for o in ep.spec["outputs"]] == [None, "s0", "3*s0+1", "(s0+1)//2"]
    pkg = ep.save(tmp_path / "pkg")
    for n in (2, 5, 8):
        x = torch.randn(n, 3)
        y, five, rows, d = ep.module()(x)
        assert (five, rows, d) == (5, n, {"cells": 3 * n + 1, "half": (n + 1) // 2})
        assert type(rows) is int and torch.equal(y, x * 2)
        for tool in ("run_model", "ptc-run"):
            got = run_in_c(pkg, [("x", x)], tmp_path, tool)
            assert list(got) == ["[0]", "[2]", "[3]['cells']", "[3]['half']"]
            ints = [got[k] for k in list(got)[1:]]
            assert all(t.dtype == torch.int64 and t.dim() == 0 for t in ints)
            assert [t.item() for t in ints] == [n, 3 * n + 1, (n + 1) // 2], tool
    loaded = ptc.load(pkg).module()(torch.randn(7, 3))
    assert loaded[1:] == (5, 7, {"cells": 22, "half": 4})


def test_int_outputs_of_a_static_export_are_constants():
    ep = ptc.export(Rows(), (torch.randn(5, 3),))
    assert [o for o in ep.spec["outputs"] if "symint" in o] == []
    assert ep.module()(torch.randn(5, 3))[1:] == (5, 5, {"cells": 16, "half": 3})


def test_a_size_expression_is_read_not_run():
    from ptc._export import size_value
    assert size_value("max(2*s0-1,s1)%7", {"s0": 4, "s1": 3}) == 0
    for bad in ("__import__('os')", "s0.real", "s9"):
        with pytest.raises(ptc.ExportError, match="size expression"):
            size_value(bad, {"s0": 1})


def test_graph_break_is_the_caret_error():
    class Chatty(torch.nn.Module):
        def forward(self, x):
            y = x * 2
            print(y)
            return y + 1

    with pytest.raises(ptc.GraphBreakError) as info:
        ptc.export(Chatty(), (torch.randn(3),))
    text = str(info.value)
    assert "print(y)" in text and "^" in text and "PTC-B" in text


def corrupt(pkg, tmp_path, name, how):
    bad = tmp_path / name.replace("/", "_")
    subprocess.run(["cp", "-r", str(pkg), str(bad)], check=True)
    how(bad)
    return bad


def test_corrupt_packages_are_refused(tmp_path):
    torch.manual_seed(0)
    ep = ptc.export(Block().eval(), (torch.randn(4, 8),))
    pkg = ep.save(tmp_path / "pkg")
    ptcio.write_tensors(tmp_path / "in.bin", [("x", torch.randn(4, 8))])
    kernel = "kernels/cpu/" + sorted(os.listdir(pkg / "kernels" / "cpu"))[0]

    def truncate(rel):
        return lambda d: os.truncate(d / rel, os.path.getsize(d / rel) // 2)

    def flip(rel):
        def do(d):
            data = bytearray((d / rel).read_bytes())
            data[len(data) // 2] ^= 0x40
            (d / rel).write_bytes(bytes(data))
        return do

    def version(d):
        m = json.loads((d / "manifest.json").read_text())
        m["ptc_version"] = "0.0.1"
        (d / "manifest.json").write_text(json.dumps(m))

    cases = [
        ("weights.bin", truncate("weights.bin"), "size mismatch"),
        ("weights.bin", flip("weights.bin"), "checksum mismatch in chunk 1 of 1"),
        ("graph.ptir", flip("graph.ptir"), "checksum mismatch"),
        (kernel, flip(kernel), "checksum mismatch"),
        ("spec.json", lambda d: os.unlink(d / "spec.json"), "missing or unreadable"),
        ("manifest.json", version, "made by ptc 0.0.1, this is ptc"),
    ]
    for k, (rel, how, message) in enumerate(cases):
        bad = corrupt(pkg, tmp_path, "bad%d" % k, how)
        with pytest.raises(ValueError, match=message) as info:
            ptc.load(bad)
        assert str(bad / rel) in str(info.value)
        r = ptcio.ptc_run("--package", bad, "--inputs", tmp_path / "in.bin")
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, r.stderr
        assert str(bad / rel) in lines[0] and message in lines[0], lines


def test_an_older_format_is_refused_at_load(tmp_path):
    """A package whose manifest an older ptc wrote (format 3: weights.bin
    pinned by one XXH64 of the whole file, "xxh64:<hex>:<bytes>") is refused
    when it is loaded, by ptc.load, ptc-run --package and the C API's example
    program, in one line naming the manifest, the versions and what this ptc
    expects of it: export the model again."""
    torch.manual_seed(0)
    ep = ptc.export(Block().eval(), (torch.randn(4, 8),),
                    dynamic_shapes={"x": {0: ptc.Dim("batch", max=64)}})
    pkg = ep.save(tmp_path / "pkg", targets=("cpu", "sm_90"))
    ptcio.write_tensors(tmp_path / "in.bin", [("x", torch.randn(4, 8))])
    ptc.load(pkg)  # as sealed: loads

    def older(d):
        m = json.loads((d / "manifest.json").read_text())
        assert m["format_version"] == 5
        m["format_version"] = 3
        pin = m["files"]["weights.bin"]
        m["files"]["weights.bin"] = "xxh64:%s:%d" % (pin["xxh64"][0], pin["bytes"])
        (d / "manifest.json").write_text(json.dumps(m))

    bad = corrupt(pkg, tmp_path, "older", older)
    message = ("package format version 3, sealed by an older ptc: this ptc reads version 5, whose "
               "packages also carry weights.bin pinned by the XXH64 of each 4 MiB chunk, checked "
               "in parallel; CUDA kernels that read their random-number offset from a device "
               "cell too")
    with pytest.raises(ValueError, match=message) as info:
        ptc.load(bad)
    assert str(bad / "manifest.json") in str(info.value) and "\n" not in str(info.value)
    runs = {"ptc-run": ptcio.ptc_run("--package", bad, "--inputs", tmp_path / "in.bin"),
            "run_model": subprocess.run([run_model_exe(), str(bad), str(tmp_path / "in.bin"),
                                         str(tmp_path / "out.bin")], capture_output=True, text=True,
                                        timeout=600)}
    for tool, r in runs.items():
        lines = r.stderr.strip().splitlines()
        assert r.returncode != 0 and len(lines) == 1, (tool, r.stderr)
        assert str(bad / "manifest.json") in lines[0] and message in lines[0], (tool, lines)
        assert "export the model again" in lines[0], (tool, lines)


def test_ptx_for_sm80_and_sm90_without_a_gpu(tmp_path):
    torch.manual_seed(0)
    ep = ptc.export(Block().eval(), (torch.randn(4, 8),),
                    dynamic_shapes={"x": {0: ptc.Dim("batch", max=64)}})
    pkg = ep.save(tmp_path / "pkg", targets=("cpu", "sm_80", "sm_90"))
    manifest = json.loads((pkg / "manifest.json").read_text())
    assert manifest["targets"] == ["cpu", "sm_80", "sm_90"]
    for sm in ("sm_80", "sm_90"):
        files = sorted(os.listdir(pkg / "kernels" / sm))
        assert files and all("kernels/%s/%s" % (sm, f) in manifest["files"] for f in files)
        assert any((".target %s" % sm).encode() in (pkg / "kernels" / sm / f).read_bytes()
                   for f in files)
    ptc.load(pkg)  # the manifest covers every kernel


@pytest.mark.slow
def test_resnet18(tmp_path):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    export_and_check(model, (torch.randn(2, 3, 64, 64),), None, tmp_path)


def hf_ids(*shape):
    return torch.randint(0, 1000, shape, generator=torch.Generator().manual_seed(0))


@pytest.mark.slow
def test_bert_from_config(tmp_path):
    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = T.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                       intermediate_size=128, vocab_size=1000)
    kwargs = {"input_ids": hf_ids(2, 16), "attention_mask": torch.ones(2, 16, dtype=torch.long)}
    ep, _ = export_and_check(T.BertModel(cfg), (), kwargs, tmp_path)
    out = ep.module()(**kwargs)
    assert type(out).__name__ == "BaseModelOutputWithPoolingAndCrossAttentions"


@pytest.mark.slow
def test_gpt2_from_config(tmp_path):
    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = T.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=64,
                       bos_token_id=0, eos_token_id=0)
    kwargs = {"input_ids": hf_ids(2, 16), "use_cache": False}
    ep, _ = export_and_check(T.GPT2LMHeadModel(cfg), (), kwargs, tmp_path)
    with pytest.raises(ptc.ExportError, match="differ in structure or constants"):
        ep.module()(input_ids=hf_ids(2, 16), use_cache=True)
