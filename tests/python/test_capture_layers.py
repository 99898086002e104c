"""compiler/capture's layers depend one way (compiler/capture/README.md):
interp <- trace <- torch <- entry <- backend <- the compiled functions on top.
Each folder includes its own header and those of layers below it; the
includes that still run up a layer are listed here by file, so that a new one
fails this test and a removed one is noticed (the list then shrinks)."""
import os
import re

SRC = os.path.join(os.environ.get("PTC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")),
                   "compiler", "capture")
ORDER = ["interp", "trace", "torch", "entry", "backend", "top"]
# file -> the layers above its own that it still includes (README: "Calls that
# still run up a layer"); the interpreter reaches them while tracing.
KNOWN_UP = {
    "interp/calls.c": {"trace"},
    "interp/interp.c": {"trace"},
    "interp/ops_data.c": {"trace"},
    "interp/ops_flow.c": {"trace"},
    "interp/values.c": {"trace", "torch"},
    "trace/autocast.c": {"torch"},
    "trace/iter.c": {"torch"},
    "trace/symint.c": {"torch"},
    "trace/trace.c": {"torch"},
    "trace/trace_call.c": {"torch"},
    "trace/trace_misc.c": {"torch"},
    "trace/trace_module.c": {"torch"},
    "trace/trace_obj.c": {"torch"},
}
HEADER_LAYER = {"capture/capture.h": "interp", "capture/exec.h": "top"}


def layer_of(rel):
    head = rel.split("/")[0]
    return head if head in ORDER else "top"


def included_layers(path):
    layers = set()
    for h in re.findall(r'#include "([^"]+)"', open(path).read()):
        if h in HEADER_LAYER:
            layers.add(HEADER_LAYER[h])
        elif h.startswith("capture/"):
            layers.add(h.split("/")[1])
        elif not re.match(r"(ir|ops|passes|autograd|lower|codegen|runtime|pipeline|logs)/", h):
            raise AssertionError("%s includes %r: name a layer's header by its path" % (path, h))
    return layers


def test_every_layer_is_a_folder_with_one_header():
    for layer in ORDER[:-1]:
        headers = [f for f in os.listdir(os.path.join(SRC, layer)) if f.endswith(".h")]
        tables = {"opcodes.h"}  # the opcode X-macro table beside interp.h
        assert sorted(set(headers) - tables) == [layer + ".h"], (layer, headers)


def test_includes_run_down_the_layers():
    found_up = {}
    for dirpath, _, files in os.walk(SRC):
        for f in files:
            if not f.endswith((".c", ".h")) or f == "torch_decomp.c":
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, SRC).replace(os.sep, "/")
            own = ORDER.index(layer_of(rel))
            up = {l for l in included_layers(path) if ORDER.index(l) > own}
            if up:
                found_up[rel] = up
    assert found_up == KNOWN_UP


def test_backends_report_nothing_themselves():
    """A backend returns its failure; the compiled functions above report it."""
    for f in os.listdir(os.path.join(SRC, "backend")):
        text = open(os.path.join(SRC, "backend", f)).read()
        assert "cap_warn_" not in text and "cap_report_" not in text, f


def test_the_loop_knows_no_continuation_kind():
    """interp.c calls a frame's continuation through its pointer."""
    text = open(os.path.join(SRC, "interp", "interp.c")).read()
    assert "RET_" not in text and "_resume(" not in text
