"""Read and write ptc tensor files (.bin) with torch (the package's own
reader and writer, ptc._tensorfile), run ptc-run, and read a compile's trace.
"""
import json
import os
import re
import subprocess

from ptc._tensorfile import CODE, DTYPES, NAMES, PTIR_NAME, read_tensors, write_tensors  # noqa: F401


def ptir_type(t, device=True):
    """The .ptir type of a tensor: f32[2,3] (with {strides} if not contiguous)."""
    s = "%s[%s]" % (PTIR_NAME[t.dtype], ",".join(str(d) for d in t.shape))
    if not t.is_contiguous() and t.numel() > 1:
        s += "{%s}" % ",".join(str(d) for d in t.stride())
    if device:
        s += " cpu"
    return s


_TYPE = re.compile(r"((?:f32|f16|bf16|f64|i64|i32|i16|i8|u8|bool)\[[^\]]*\](?:\{[^}]*\})?)(?: cpu)?")


def ptir_on_cuda(ptir):
    """A graph captured on the CPU (.ptir text) as the same graph on CUDA:
    every tensor type (inputs and node results) and creation op moved to
    the GPU, so that ptc-run --backend cuda plans it as a CUDA graph."""
    cuda = lambda m: m.group(1) + " cuda"  # noqa: E731
    lines = []
    for line in ptir.splitlines():
        line = line.replace("device=cpu", "device=cuda")
        head, sep, rest = line.partition(" : ")
        if not sep:  # the signature: its inputs' types
            lines.append(_TYPE.sub(cuda, line))
            continue
        types, at, src = rest.partition("  @ ")
        lines.append(head + sep + _TYPE.sub(cuda, types) + at + src)
    return "\n".join(lines) + "\n"


def build_dir():
    return os.environ.get("PTC_BUILD_DIR") or os.path.join(
        os.path.dirname(__file__), "..", "..", "build")


def ptc_run(*args, check=False, timeout=120):
    """Runs the built ptc-run; returns CompletedProcess (text)."""
    exe = os.path.join(build_dir(), "tools", "run", "ptc-run")
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, check=check)


def op_names(src_dir):
    """The printed names of the ops of compiler/ir/ops.def: its own OP rows and
    those it generates from pointwise.def (a torch-level row's name column, a
    prim row's prims.<lname>)."""
    ir = os.path.join(src_dir, "compiler", "ir")
    with open(os.path.join(ir, "ops.def")) as f:
        names = re.findall(r'^OP\(\w+, \w+, "([\w.]+)\(', f.read(), re.M)
    with open(os.path.join(ir, "pointwise.def")) as f:
        rows = f.read()
    names += re.findall(r'^PW_(?:UNARY|BINARY)\(\w+, "(\w+)"', rows, re.M)
    names += ["prims." + n for n in re.findall(r'^PW_PRIM\(\w+, \w+, "(\w+)"', rows, re.M)]
    return names


def traced(fn, *args, tmp_path):
    """fn compiled and called with tracing into tmp_path (one compile): its
    result, the compile's kernels.txt and its metrics.json."""
    import ptc
    old = ptc.config.trace_dir
    ptc.config.trace_dir = str(tmp_path)
    try:
        out = ptc.compile(fn)(*args)
    finally:
        ptc.config.trace_dir = old
    [folder] = [d for d in os.listdir(tmp_path) if (tmp_path / d).is_dir()]
    kernels = (tmp_path / folder / "kernels.txt").read_text()
    metrics = json.loads((tmp_path / folder / "metrics.json").read_text())
    return out, kernels, metrics
