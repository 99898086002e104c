"""ptc-run's behaviour as a user sees it: exit status 0/1/2, one-line errors
naming file:line:col, --seed determinism, --emit=ptir round trips, tensor files
in and out (checked against eager PyTorch on the shipped examples), and bad
command lines."""
import glob
import os
import re

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import ptcio  # noqa: E402

SRC = os.environ.get("PTC_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
EXAMPLES = os.path.join(SRC, "examples")
GOLDEN = sorted(glob.glob(os.path.join(SRC, "tests", "golden", "*.ptir")))
MALFORMED = sorted(glob.glob(os.path.join(SRC, "tests", "malformed", "*.ptir")))
EXAMPLE_FILES = sorted(glob.glob(os.path.join(EXAMPLES, "*.ptir")))


def example(name):
    return os.path.join(EXAMPLES, name)


def run(*args, **kw):
    return ptcio.ptc_run(*args, **kw)


def one_line_error(r):
    """stderr is exactly one line starting 'ptc-run: '; returns it."""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("ptc-run: "), r.stderr
    return lines[0]


def expected_print(path):
    """The canonical print embedded in a golden file."""
    text = open(path, encoding="utf-8", newline="").read()
    block = text.split("# >>> output", 1)[1].split("# <<<", 1)[0]
    lines = [l.rstrip("\r") for l in block.split("\n")[1:-1]]
    return "".join((l[2:] if l.startswith("# ") else "") + "\n" for l in lines)


def test_binary_is_built():
    exe = os.path.join(ptcio.build_dir(), "tools", "run", "ptc-run")
    assert os.access(exe, os.X_OK), "ptc-run is not built at %s" % exe


# ---- exit status 0 and --emit=ptir ------------------------------------------

@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=os.path.basename)
def test_examples_run(path):
    r = run("--seed", 1, path)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    outputs = re.findall(r"^output (\d+) \(%\S+\): (\w+)\[([\d,]*)\] (.*)$", r.stdout, re.M)
    assert outputs, r.stdout
    for _, dtype, _, stats in outputs:
        assert "nonfinite" not in stats, r.stdout


@pytest.mark.parametrize("path", EXAMPLE_FILES + GOLDEN, ids=os.path.basename)
def test_emit_round_trip(path, tmp_path):
    """--emit=ptir prints the canonical form (for golden files: the embedded
    expected print), which reads back to the same text. Golden files marked
    '# structural:' are rejected by the ops verifier instead, with one line
    naming the file and line."""
    r = run("--emit=ptir", path)
    if "# structural:" in open(path, encoding="utf-8").read():
        assert r.returncode == 2
        assert re.match(r"ptc-run: %s:\d+:" % re.escape(path), one_line_error(r))
        return
    assert r.returncode == 0, r.stderr
    if path in GOLDEN:
        assert r.stdout == expected_print(path)
    again = tmp_path / "again.ptir"
    again.write_text(r.stdout)
    r2 = run("--emit", "ptir", again)
    assert r2.returncode == 0, r2.stderr
    assert r2.stdout == r.stdout


# ---- exit status 2: malformed graphs ------------------------------------------

@pytest.mark.parametrize("path", MALFORMED, ids=os.path.basename)
def test_malformed_graph_one_line_error(path):
    text = open(path, "rb").read().decode("utf-8", "replace")
    line, col, msg = re.search(r"# error: (\d+):(\d+): (.*)", text).groups()
    r = run(path)
    assert r.returncode == 2
    err = one_line_error(r)
    assert err.startswith("ptc-run: %s:%s:%s: " % (path, line, col)), err
    assert msg.strip() in err
    assert r.stdout == ""


def test_missing_graph_file(tmp_path):
    r = run(tmp_path / "nope.ptir")
    assert r.returncode == 2
    assert "nope.ptir" in one_line_error(r)


def test_meta_error_names_file_and_line(tmp_path):
    bad = tmp_path / "bad_shape.ptir"
    bad.write_text("# ptc ir v1\n"
                   "graph f(%x: f32[2,3] cpu, %y: f32[4] cpu) {\n"
                   "  %0 = add(%x, %y) : f32[2,3]\n"
                   "  return (%0)\n"
                   "}\n")
    r = run(bad)
    assert r.returncode == 2
    err = one_line_error(r)
    assert err.startswith("ptc-run: %s:3" % bad), err
    assert "add" in err


@pytest.mark.parametrize("call,message", [
    ('gelu(%x, approximate="bogus")', "gelu: approximate must be one of 'none', 'tanh', got 'bogus'"),
    ('div(%x, %x, rounding_mode="round")',
     "div: rounding_mode must be None or one of 'trunc', 'floor', got 'round'"),
])
def test_bad_enum_attribute_names_file_and_line(tmp_path, call, message):
    """Every str attribute with a closed set of words (torch raises for any
    other) is checked by the verifier: one line naming file, line and the
    node's column, exit 2 (gelu's used to fail at compile time without a
    file)."""
    bad = tmp_path / "bad_enum.ptir"
    bad.write_text("# ptc ir v1\n"
                   "graph f(%%x: f32[2,3] cpu) {\n"
                   "  %%0 = %s : f32[2,3]\n"
                   "  return (%%0)\n"
                   "}\n" % call)
    for check in ([], ["--check"]):
        r = run(*check, bad)
        assert r.returncode == 2
        err = one_line_error(r)
        assert err.startswith("ptc-run: %s:3:3: " % bad), err
        assert message in err


# ---- --seed ------------------------------------------------------------------

def test_seed_is_deterministic():
    a = run("--seed", 7, example("attention.ptir"))
    b = run("--seed=7", example("attention.ptir"))
    c = run("--seed", 8, example("attention.ptir"))
    assert a.returncode == b.returncode == c.returncode == 0
    assert a.stdout == b.stdout
    assert a.stdout != c.stdout


def test_symbolic_sizes_default_and_sym_flag():
    r = run("--seed", 5, example("symbolic_batch.ptir"))
    assert r.returncode == 0, r.stderr
    assert "output 0 (%3): f32[4,8]" in r.stdout
    assert "output 1 (%4): f32[16,1]" in r.stdout
    r = run("--seed", 5, "--sym", "s0=3", "--sym=s1=7", example("symbolic_batch.ptir"))
    assert r.returncode == 0, r.stderr
    assert "output 0 (%3): f32[3,8]" in r.stdout
    assert "output 1 (%4): f32[21,1]" in r.stdout


def test_graph_selection(tmp_path):
    two = tmp_path / "two.ptir"
    two.write_text("# ptc ir v1\n"
                   "graph first(%x: f32[2] cpu) {\n  %0 = neg(%x) : f32[2]\n  return (%0)\n}\n"
                   "graph second(%x: i64[3] cpu) {\n  %y = abs(%x) : i64[3]\n  return (%y)\n}\n")
    r = run(two)
    assert r.returncode == 0 and "output 0 (%0): f32[2]" in r.stdout, r.stderr
    r = run("--graph", "second", two)
    assert r.returncode == 0 and "output 0 (%y): i64[3]" in r.stdout, r.stderr
    r = run("--graph", "third", two)
    assert r.returncode == 2
    assert "no graph named 'third'" in one_line_error(r)


# ---- --inputs / --save-outputs, against eager PyTorch ----------------------

def randn(*shape, scale=1.0):
    return torch.randn(*shape, dtype=torch.float32) * scale


def mlp_case():
    p = {"x": randn(8, 16), "fc0.weight": randn(32, 16, scale=0.25), "fc0.bias": randn(32),
         "fc1.weight": randn(10, 32, scale=0.2), "fc1.bias": randn(10)}
    # A transposed (dense, non-contiguous) weight: its strides travel in the file.
    p["fc0.weight"] = p["fc0.weight"].t().contiguous().t()
    h = F.relu(F.linear(p["x"], p["fc0.weight"], p["fc0.bias"]))
    return p, [F.linear(h, p["fc1.weight"], p["fc1.bias"]).log_softmax(1)]


def residual_case():
    p = {"x": randn(2, 8, 16, 16), "conv1.weight": randn(8, 8, 3, 3, scale=0.1),
         "gn1.weight": randn(8), "gn1.bias": randn(8), "conv2.weight": randn(8, 8, 3, 3, scale=0.1),
         "gn2.weight": randn(8), "gn2.bias": randn(8)}
    h = F.conv2d(p["x"], p["conv1.weight"], padding=1)
    h = F.relu(F.group_norm(h, 4, p["gn1.weight"], p["gn1.bias"]))
    h = F.group_norm(F.conv2d(h, p["conv2.weight"], padding=1), 4, p["gn2.weight"], p["gn2.bias"])
    return p, [F.relu(h + p["x"])]


def attention_case():
    p = {"x": randn(2, 6, 16), "qkv.weight": randn(48, 16, scale=0.25), "qkv.bias": randn(48),
         "proj.weight": randn(16, 16, scale=0.25), "proj.bias": randn(16)}
    qkv = F.linear(p["x"], p["qkv.weight"], p["qkv.bias"]).reshape(2, 6, 3, 2, 8)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
    a = ((q @ k.transpose(-2, -1)) * 0.35355339059327373).softmax(-1)
    o = (a @ v).transpose(1, 2).reshape(2, 6, 16)
    return p, [F.linear(o, p["proj.weight"], p["proj.bias"])]


def layernorm_gelu_case():
    p = {"x": randn(2, 5, 12), "ln.weight": randn(12), "ln.bias": randn(12),
         "fc1.weight": randn(48, 12, scale=0.3), "fc1.bias": randn(48),
         "fc2.weight": randn(12, 48, scale=0.15), "fc2.bias": randn(12)}
    h = F.layer_norm(p["x"], [12], p["ln.weight"], p["ln.bias"])
    h = F.gelu(F.linear(h, p["fc1.weight"], p["fc1.bias"]), approximate="tanh")
    return p, [p["x"] + F.linear(h, p["fc2.weight"], p["fc2.bias"])]


def symbolic_case():
    p = {"tokens": randn(3, 7, 8), "w": randn(8, 8, scale=0.3)}
    h = F.linear(p["tokens"], p["w"]).tanh()
    return p, [h.mean(1), h.reshape(21, 8).amax(1, keepdim=True)]


CASES = {"mlp.ptir": mlp_case, "residual_block.ptir": residual_case,
         "attention.ptir": attention_case, "layernorm_gelu.ptir": layernorm_gelu_case,
         "symbolic_batch.ptir": symbolic_case}


@pytest.mark.parametrize("name", sorted(CASES))
def test_outputs_match_pytorch(name, tmp_path):
    torch.manual_seed(0)
    inputs, expected = CASES[name]()
    inp, out = tmp_path / "in.bin", tmp_path / "out.bin"
    ptcio.write_tensors(inp, inputs)
    r = run("--inputs", inp, "--save-outputs", out, example(name))
    assert r.returncode == 0, r.stderr
    got = ptcio.read_tensors(out)
    assert len(got) == len(expected)
    for (oname, t), want in zip(got, expected):
        assert t.shape == want.shape, oname
        torch.testing.assert_close(t, want, rtol=1e-4, atol=1e-4)


def test_inputs_by_position_and_outputs_reread(tmp_path):
    """Unnamed inputs bind by position; saved outputs read back bit for bit
    (ptc-run's own summary line agrees with them)."""
    x = torch.arange(6, dtype=torch.int64).reshape(2, 3) - 2
    g = tmp_path / "g.ptir"
    g.write_text("# ptc ir v1\n"
                 "graph f(%a: i64[2,3] cpu, %b: f16[3] cpu) {\n"
                 "  %0 = abs(%a) : i64[2,3]\n"
                 "  %1 = neg(%b) : f16[3]\n"
                 "  return (%0, %1, %a)\n"
                 "}\n")
    b = torch.tensor([1.5, -2.25, 65504.0], dtype=torch.float16)
    ptcio.write_tensors(tmp_path / "in.bin", [("p", x), ("q", b)])
    r = run("--inputs", tmp_path / "in.bin", "--save-outputs", tmp_path / "out.bin", g)
    assert r.returncode == 0, r.stderr
    assert "output 0 (%0): i64[2,3] sum=9 mean=1.5 min=0 max=3" in r.stdout
    got = dict(ptcio.read_tensors(tmp_path / "out.bin"))
    assert torch.equal(got["0"], x.abs())
    assert torch.equal(got["1"], -b)
    assert torch.equal(got["a"], x)


@pytest.mark.parametrize("check", [[], ["--check"]], ids=["run", "check"])
@pytest.mark.parametrize("case,message", [
    ("dtype", "input %tokens: expected dtype f32, got f64"),
    ("rank", "input %tokens: expected 3 dims, got 2"),
    ("shape", "input %w: dim 0 is 7, expected 8"),
])
def test_inputs_that_do_not_fit_fail_on_load(tmp_path, check, case, message):
    """A tensor file whose tensors do not fit the graph's inputs is bad input
    (exit 2, one line naming the file and the input), with or without
    --check (which used to report "check: skipped" and exit 0)."""
    tensors = {"dtype": {"tokens": torch.zeros(4, 3, 8, dtype=torch.float64), "w": torch.zeros(8, 8)},
               "rank": {"tokens": torch.zeros(4, 8), "w": torch.zeros(8, 8)},
               "shape": {"tokens": torch.zeros(4, 3, 8), "w": torch.zeros(7, 8)}}[case]
    path = tmp_path / "in.bin"
    ptcio.write_tensors(path, tensors)
    r = run(*check, "--inputs", path, example("symbolic_batch.ptir"))
    assert r.returncode == 2, r.stdout + r.stderr
    err = one_line_error(r)
    assert err.startswith("ptc-run: %s: " % path), err
    assert message in err
    assert r.stdout == ""


OVERLAPPING = ("# ptc ir v1\n"
               "graph f(%x: f32[4,3]{0,1} cpu) {\n"
               "  %0 = mul(%x, 2.0) : f32[4,3]\n"
               "  return (%0)\n"
               "}\n")


def test_overlapping_strides_take_an_expanded_input(tmp_path):
    """Strides that share elements are legal torch inputs (expand): a tensor
    with those values runs and checks, and gives eager's result."""
    g = tmp_path / "g.ptir"
    g.write_text(OVERLAPPING)
    x = torch.randn(3).expand(4, 3)
    ptcio.write_tensors(tmp_path / "in.bin", {"x": x})
    r = run("--check", "--inputs", tmp_path / "in.bin", "--save-outputs", tmp_path / "out.bin", g)
    assert r.returncode == 0, r.stderr
    assert "check: 1 outputs match the reference" in r.stdout
    torch.testing.assert_close(dict(ptcio.read_tensors(tmp_path / "out.bin"))["0"], x * 2)
    r = run("--check", "--seed", 3, g)
    assert r.returncode == 0, r.stderr
    assert "check: 1 outputs match the reference" in r.stdout


def test_overlapping_strides_reject_values_they_cannot_hold(tmp_path):
    """Values that differ where the declared layout shares elements cannot be
    given that layout: a one-line error naming the file and the input, not a
    lossy copy and a false mismatch."""
    g = tmp_path / "g.ptir"
    g.write_text(OVERLAPPING)
    ptcio.write_tensors(tmp_path / "in.bin", {"x": torch.arange(12.0).reshape(4, 3)})
    for check in ([], ["--check"]):
        r = run(*check, "--inputs", tmp_path / "in.bin", g)
        assert r.returncode == 2, r.stdout + r.stderr
        err = one_line_error(r)
        assert err.startswith("ptc-run: %s: " % (tmp_path / "in.bin")), err
        assert "input %x" in err and "share memory" in err


def test_view_of_huge_strides_is_a_meta_error(tmp_path):
    """A stride whose products pass int64 (signed overflow in view's
    stride check before) is a located error."""
    g = tmp_path / "g.ptir"
    g.write_text("# ptc ir v1\n"
                 "graph f(%x: f32[4,3]{4611686018427387904,1} cpu) {\n"
                 "  %0 = view(%x, [12]) : f32[12]\n"
                 "  return (%0)\n"
                 "}\n")
    r = run(g)
    assert r.returncode == 2
    err = one_line_error(r)
    assert err.startswith("ptc-run: %s:3:3: " % g), err
    assert "not compatible with the strides" in err


def test_index_out_of_range_fails_at_run_time(tmp_path):
    g = tmp_path / "emb.ptir"
    g.write_text("# ptc ir v1\n"
                 "graph f(%w: f32[4,2] cpu, %i: i64[3] cpu) {\n"
                 "  %0 = embedding(%w, %i) : f32[3,2]\n"
                 "  return (%0)\n"
                 "}\n")
    ptcio.write_tensors(tmp_path / "in.bin", {"w": torch.zeros(4, 2),
                                               "i": torch.tensor([0, 9, 1])})
    r = run("--inputs", tmp_path / "in.bin", g)
    assert r.returncode == 1
    err = one_line_error(r)
    assert err.startswith("ptc-run: %s: " % g), err
    assert "index out of range" in err


def test_every_failure_names_the_graph_file(tmp_path, monkeypatch):
    """Compile errors, run errors and check mismatches are one line naming
    the graph file; with --all also the graph."""
    g = tmp_path / "g.ptir"
    g.write_text("# ptc ir v1\n"
                 "graph first(%x: f32[2,3] cpu) {\n  %0 = tanh(%x) : f32[2,3]\n  return (%0)\n}\n"
                 "graph second(%x: f32[4] cpu) {\n  %0 = tanh(%x) : f32[4]\n  return (%0)\n}\n")
    cases = [("lower:prims.tanh:error", [], "injected error in lower of prims.tanh"),
             ("runtime:prims.tanh:error", [], "injected error in runtime of prims.tanh"),
             ("codegen:prims.tanh:wrong", ["--check"], "output 0 (%0) mismatch at [0, 0]")]
    for inject, args, message in cases:
        monkeypatch.setenv("PTC_INJECT", inject)
        for all_graphs in ([], ["--all"]):
            r = run("--backend", "cpu", "--no-cache", *args, *all_graphs, g)
            assert r.returncode == 1, r.stderr
            err = one_line_error(r)
            assert err.startswith("ptc-run: %s: " % g), err
            assert message in err
            assert err.endswith(" (in graph 'first')") == bool(all_graphs), err


def test_bad_tensor_files(tmp_path):
    path = tmp_path / "in.bin"
    ptcio.write_tensors(path, {"x": torch.zeros(2, 2)})
    good = path.read_bytes()
    cases = {"truncated": good[:-7], "bad magic": b"NOPE" + good[4:],
             "corrupt": good[:20] + bytes([good[20] ^ 1]) + good[21:]}
    for what, data in cases.items():
        path.write_bytes(data)
        r = run("--inputs", path, example("mlp.ptir"))
        assert r.returncode == 2, what
        assert str(path) in one_line_error(r), what
    # Readable but the wrong number of tensors for the graph.
    ptcio.write_tensors(path, {"a": torch.zeros(1)})
    r = run("--inputs", path, example("mlp.ptir"))
    assert r.returncode == 2
    assert "holds 1 tensors" in one_line_error(r)
    r = run("--inputs", tmp_path / "missing.bin", example("mlp.ptir"))
    assert r.returncode == 2
    one_line_error(r)


# ---- command lines -------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["--frobnicate", "G"], "unknown option '--frobnicate'"),
    (["--emit=dot", "G"], "--emit expects one of ptir"),
    (["--backend", "tpu", "G"], "unknown backend 'tpu'"),
    (["--seed", "abc", "G"], "--seed expects a non-negative integer"),
    (["--seed", "-3", "G"], "--seed expects a non-negative integer"),
    (["--sym", "s0", "G"], "--sym expects NAME=VALUE"),
    (["--sym", "s0=-1", "G"], "--sym expects NAME=VALUE"),
    (["--seed", "3", "--inputs", "x.bin", "G"], "exclusive"),
    ([], "no graph file given"),
    (["G", "G"], "more than one graph file"),
])
def test_bad_command_lines(args, message):
    args = [example("mlp.ptir") if a == "G" else a for a in args]
    r = run(*args)
    assert r.returncode == 2
    assert message in one_line_error(r)
    assert r.stdout == ""


def test_help():
    r = run("--help")
    assert r.returncode == 0
    assert r.stdout.startswith("usage: ptc-run")
    assert r.stderr == ""
