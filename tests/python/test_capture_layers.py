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
# file -> the layers above its own that it still includes (README). None: the
# interpreter reaches the trace through its hook table (cap_hooks), the trace
# the torch layer through its own (cap_thooks).
KNOWN_UP = {}
HEADER_LAYER = {"capture/capture.h": "interp", "capture/report.h": "top", "capture/exec.h": "top"}
# The top's files, each using only those before it: reporting is reached by
# the runner's calls and return values, the runner by the compiled functions.
TOP_ORDER = ["measure.c", "report.c", "compile.c", "exec.c", "compiled.c"]


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
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, SRC).replace(os.sep, "/")
            own = ORDER.index(layer_of(rel))
            up = {l for l in included_layers(path) if ORDER.index(l) > own}
            if up:
                found_up[rel] = up
    assert found_up == KNOWN_UP


def strip_comments(text):
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)


def defined_names(path):
    """The functions and variables a .c file defines for other files."""
    text = strip_comments(open(path).read())
    names = set()
    for m in re.finditer(r"^(?!static\b|typedef\b|extern\b)[A-Za-z_][\w \t\*]*?\b(cap_\w+)\s*([(;,=\[])", text, re.M):
        if m.group(2) != "(":
            names.add(m.group(1))  # a variable: cap_T, cap_hooks, cap_handlers[]
            continue
        rest = text[m.end():]
        body, decl = rest.find("{"), rest.find(";")
        if body >= 0 and (decl < 0 or body < decl):
            names.add(m.group(1))
    # opcode handlers, defined through HANDLER(NAME) (interp.h)
    names |= {"cap_h_" + h for h in re.findall(r"^HANDLER\((\w+)\)", text, re.M)}
    return names


def sources_by_layer():
    files = {}
    for dirpath, _, names in os.walk(SRC):
        for f in names:
            if f.endswith(".c"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, SRC).replace(os.sep, "/")
                files.setdefault(layer_of(rel), []).append(path)
    return files


def test_no_call_runs_up_a_layer():
    """A name a layer uses that a layer above defines is an up-call: the
    interpreter and the trace reach the layers above through hook tables."""
    files = sources_by_layer()
    for low in ORDER[:-1]:
        above = set()
        for layer in ORDER[ORDER.index(low) + 1:]:
            for path in files.get(layer, []):
                above |= defined_names(path)
        for path in files[low]:
            used = set(re.findall(r"\bcap_\w+", strip_comments(open(path).read())))
            assert not used & above, (os.path.relpath(path, SRC), sorted(used & above))


def test_the_top_runs_one_way():
    """report.c knows no runner or compiled function, compile.c (compiling on
    a miss) no runner, exec.c (the runner) no compiled function: each file uses no name a file after it defines, and
    report.h does not include exec.h."""
    paths = [os.path.join(SRC, f) for f in TOP_ORDER]
    for i, path in enumerate(paths):
        used = set(re.findall(r"\bcap_\w+", strip_comments(open(path).read())))
        for later in paths[i + 1:]:
            up = used & defined_names(later)
            assert not up, (TOP_ORDER[i], os.path.basename(later), sorted(up))
    assert '#include "capture/exec.h"' not in open(os.path.join(SRC, "report.h")).read()
    for f in ("report.c", "measure.c"):
        assert "cap_compiled" not in strip_comments(open(os.path.join(SRC, f)).read()), f


# Inside a folder, the files in the order in which each uses only names
# that those before it define: lower files know nothing of higher ones.
FILE_ORDER = {
    # code objects, helpers on Python objects, version tags, frames and their
    # traceback entries, value operations, calls, the handlers, and last the
    # loop with its handler table
    "interp": ["code.c", "pyobjects.c", "typever.c", "frames.c", "tracebacks.c", "values.c",
               "calls.c", "ops_flow.c", "ops_data.c", "loop.c"],
    # the binder first; the special handlers; the call path, which knows the
    # handlers that draw random numbers; the table naming every handler; the
    # symbolic tensor type, which sets the tables up and fills the hook tables;
    # numpy's arrays of traced tensors (torch_ndarray.c, then np.<func> in
    # torch_npfuncs.c) sit above the call path and below the table
    "torch": ["torch_map.c", "torch_strides.c", "torch_compose.c", "torch_permviews.c", "torch_builtins.c", "torch_numpy.c",
              "torch_ops.c", "torch_nn.c", "torch_shape.c", "torch_composite.c", "torch_query.c", "torch_einsum.c",
              "torch_foreach.c", "torch_call.c", "torch_ndarray.c", "torch_npfuncs.c", "torch_table.c",
              "torch_types.c"],
    # numpy values (scalars as the numbers torch reads them as, arrays as
    # tensors by from_numpy); breaks, the
    # source table, torch objects, guards, ids, nested runs,
    # symbolic sizes; autocast's state and policy; the trace's life and its
    # symbolic tensors; graph nodes; in-place writes to inputs; the iterator
    # types (which advance what they hold through cap_hooks); values and
    # their sources; callables; side effects (which flow a container out
    # through cap_hooks); tracing objects; with-blocks; generator functions;
    # modules, an optimizer's step, calls and the hook rows
    "trace": ["numpy_values.c", "breaks.c", "source_table.c", "torch_objects.c", "trace_split.c", "guards.c", "ids.c",
              "sync_calls.c", "symint.c", "autocast.c", "lifecycle.c", "nodes.c", "inplace.c",
              "iter.c", "sources.c", "callables.c", "effects.c", "iter_outside.c", "objects.c", "star_args.c",
              "with_blocks.c", "generators.c", "modules.c", "trace_operator.c", "lru.c", "copies.c",
              "builtins.c", "optim_step.c", "classes.c", "calls.c",
              "hooks.c"],
    # the dispatcher backend.c last
    "backend": ["tensors.c", "weight_cache.c", "rng.c", "eager.c", "graphobj.c", "saved_blocks.c",
                "out_strides.c", "backend_ptc.c",
                "backend_train.c", "backend_pieces.c", "backend.c"],
}


def names_used(path, defined):
    """The cap_ names a file uses; a name pasted by an X-macro (cap_h_##h,
    cap_th_##h) uses every defined name it can paste."""
    text = strip_comments(open(path).read())
    used = set(re.findall(r"\bcap_\w+", text))
    for prefix in re.findall(r"\b(cap_\w*)##", text):
        used |= {n for n in defined if n.startswith(prefix)}
    return used


def assert_files_run_one_way(folder):
    """Every .c file of the folder stands in its order once, and none uses a
    name a later one defines: no two files call each other."""
    files = FILE_ORDER[folder]
    assert sorted(files) == sorted(f for f in os.listdir(os.path.join(SRC, folder))
                                   if f.endswith(".c")), folder
    defined = {f: defined_names(os.path.join(SRC, folder, f)) for f in files}
    everything = set().union(*defined.values())
    for i, f in enumerate(files):
        used = names_used(os.path.join(SRC, folder, f), everything)
        for g in files[i + 1:]:
            up = used & defined[g]
            assert not up, (folder, f, g, sorted(up))


def test_interp_files_run_one_way():
    assert_files_run_one_way("interp")


def test_trace_files_run_one_way():
    assert_files_run_one_way("trace")


def test_torch_files_run_one_way():
    assert_files_run_one_way("torch")


def test_backend_files_run_one_way():
    assert_files_run_one_way("backend")


def test_backends_report_nothing_themselves():
    """A backend returns its failure; the compiled functions above report it."""
    for f in os.listdir(os.path.join(SRC, "backend")):
        text = open(os.path.join(SRC, "backend", f)).read()
        assert "cap_warn_" not in text and "cap_report_" not in text, f


def test_the_loop_knows_no_continuation_kind():
    """The loop and returning from a frame call a frame's continuation
    through its pointer."""
    for f in ("loop.c", "frames.c"):
        text = open(os.path.join(SRC, "interp", f)).read()
        assert "RET_" not in text and "_resume(" not in text, f


def test_trace_header_inlines_call_no_trace_file():
    """An inline function of trace.h runs in every file that includes it: one
    that called a trace file's function would be a call up the order from
    every file below that one (cap_t_outside, now in sources.c, was)."""
    text = strip_comments(open(os.path.join(SRC, "trace", "trace.h")).read())
    called = set()
    for body in re.findall(r"static inline[^{;]*\{(.*?)\n?\}\n", text, re.S):
        called |= set(re.findall(r"\b(cap_\w+)\s*\(", body))
    functions = set()
    for f in FILE_ORDER["trace"]:
        src = strip_comments(open(os.path.join(SRC, "trace", f)).read())
        functions |= {n for n in defined_names(os.path.join(SRC, "trace", f))
                      if re.search(r"\b%s\s*\(" % n, src)}
    assert not called & functions, sorted(called & functions)
