"""ptc.export: a whole model captured ahead of time as one graph, saved as a
package folder that C programs load and run with no Python (compiler/export,
ptc-run --package, man ptc.7 "EXPORT").

The capture is ptc.compile's with fullgraph semantics: a graph break is a
GraphBreakError that shows the line with a caret and the hint. The graph's
inputs are the user's tensors and the parameters, buffers and other tensors
the forward read, each lifted to a named input. What the export records of
the example call — the structure of the arguments and of the result, each
input's dtype, device and sizes, which sizes are symbolic and their ranges
(dynamic_shapes, as torch.export's) — is the specification every later call
is checked against (the exported guards). An int the forward computes from
symbolic sizes (return y, x.shape[0] * 2) is an output too: its expression,
computed from each call's sizes.
"""
import ast
import dataclasses
import importlib
import inspect
import json
import os
import re
import warnings

from . import _C, _tensorfile
from ._dynamic import mark_dynamic

SPEC_VERSION = 1
_UNBOUNDED = 1 << 62  # torch.export's Dim max without a bound


class ExportError(RuntimeError):
    """The model or its example call cannot be exported as asked."""


class Dim:
    """A symbolic size for dynamic_shapes, as torch.export.Dim (which ptc
    accepts too): Dim("batch", min=2, max=64). The same Dim on two inputs
    says their sizes are equal."""

    def __init__(self, name, *, min=None, max=None):
        self.__name__ = name
        self.min, self.max = min, max

    def __repr__(self):
        return "Dim(%r, min=%r, max=%r)" % (self.__name__, self.min, self.max)


class SymIntResult(int):
    """An int of the exported forward's result that the trace computed from
    symbolic sizes: its value in the example call, and its expression over
    the graph's symbols ("2*s0+1"). The capture makes these in place of
    specialising the size (ptc._C._compile(..., symint_results=True))."""

    def __new__(cls, value, expr):
        self = super().__new__(cls, value)
        self.expr = expr
        return self


_SIZE_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
             ast.Mult: lambda a, b: a * b, ast.FloorDiv: lambda a, b: a // b,
             ast.Mod: lambda a, b: a % b}


def size_value(expr, bound):
    """The value of a size expression as ptc prints them ("2*s0+1",
    "(s0+1)//2", "max(s0,s1)") with the symbols bound; only that grammar is
    read (a package's spec.json is data, never code)."""
    def value(n):
        if isinstance(n, ast.Constant) and type(n.value) is int:
            return n.value
        if isinstance(n, ast.Name) and n.id in bound:
            return bound[n.id]
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -value(n.operand)
        if isinstance(n, ast.BinOp) and type(n.op) in _SIZE_OPS:
            return _SIZE_OPS[type(n.op)](value(n.left), value(n.right))
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("max", "min")
                and n.args and not n.keywords):
            return (max if n.func.id == "max" else min)(value(a) for a in n.args)
        raise ExportError("ptc: the size expression %r reads %s, which the call's inputs do not "
                          "give" % (expr, ast.dump(n)))

    return value(ast.parse(expr, mode="eval").body)


# ---- structures: flatten a Python value to tensor leaves and a JSON tree ------------


def _class_path(obj):
    cls = type(obj)
    return "%s:%s" % (cls.__module__, cls.__qualname__)


def _fields(obj):
    """(keys, values) of a dataclass-like object (dataclasses, Hugging Face
    ModelOutput, namedtuples), else None."""
    if isinstance(obj, tuple) and hasattr(type(obj), "_fields"):
        return list(type(obj)._fields), list(obj)
    if hasattr(obj, "to_tuple") and hasattr(obj, "keys"):  # transformers.ModelOutput
        return list(obj.keys()), [obj[k] for k in obj.keys()]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        names = [f.name for f in dataclasses.fields(obj)]
        return names, [getattr(obj, k) for k in names]
    return None


def flatten(value, leaves, path="", what="value"):
    """The JSON tree of value; its tensors are appended to leaves as (path, tensor)."""
    import torch

    if isinstance(value, (torch.Tensor, SymIntResult)):
        leaves.append((path or "[0]", value))
        return {"t": "tensor" if isinstance(value, torch.Tensor) else "symint",
                "i": len(leaves) - 1}
    fields = _fields(value)
    if fields is not None:
        keys, items = fields
        return {"t": "object", "class": _class_path(value), "keys": keys,
                "tuple": isinstance(value, tuple),
                "items": [flatten(v, leaves, "%s.%s" % (path, k), what) for k, v in zip(keys, items)]}
    if isinstance(value, (tuple, list)):
        return {"t": type(value).__name__ if type(value) in (tuple, list) else "tuple",
                "items": [flatten(v, leaves, "%s[%d]" % (path, i), what) for i, v in enumerate(value)]}
    if isinstance(value, dict):
        keys = list(value)
        if not all(isinstance(k, (str, int)) for k in keys):
            raise ExportError("ptc.export: %s %s is a dict with keys other than str and int" % (what, path))
        return {"t": "dict", "keys": keys,
                "items": [flatten(value[k], leaves, "%s[%r]" % (path, k), what) for k in keys]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"t": "const", "v": value}
    raise ExportError("ptc.export: %s %s is a %s, which an exported program cannot hold "
                      "(tensors, None, numbers, strings, tuples, lists, dicts and dataclasses can)"
                      % (what, path or "", type(value).__name__))


def unflatten(tree, leaves):
    kind = tree["t"]
    if kind in ("tensor", "symint"):
        return leaves[tree["i"]]
    if kind == "const":
        return tree["v"]
    items = [unflatten(t, leaves) for t in tree.get("items", [])]
    if kind in ("tuple", "list"):
        return tuple(items) if kind == "tuple" else items
    if kind == "dict":
        return dict(zip(tree["keys"], items))
    module, qualname = tree["class"].split(":")
    cls = importlib.import_module(module)
    for part in qualname.split("."):
        cls = getattr(cls, part)
    if tree["tuple"] and hasattr(cls, "_fields"):
        return cls(*items)
    return cls(**dict(zip(tree["keys"], items)))


def _skeleton(tree):
    """The tree without constants' values where tensors stand: two calls
    with equal skeletons have the same structure and the same constants."""
    return json.dumps(tree, sort_keys=True)


# ---- dynamic_shapes --------------------------------------------------------------------


def _dim_of(spec):
    """(name, min, max) of a Dim-like object, or None for a static dim."""
    if spec is None:
        return None
    name = getattr(spec, "__name__", None)
    if name in ("STATIC",) or (isinstance(spec, str) and spec.upper() == "STATIC"):
        return None
    if name is None or not hasattr(spec, "min"):  # Dim.AUTO / Dim.DYNAMIC hints
        name, lo, hi = str(spec), None, None
    else:
        lo, hi = spec.min, spec.max
    hi = None if hi is None or hi >= _UNBOUNDED else int(hi)
    return name, int(lo or 0), hi


def _tensor_dims(t, spec, path, example):
    """{dim: (name, min, max)} for one tensor's dynamic_shapes entry; example
    keeps each Dim's first size, which every other use must repeat."""
    if spec is None:
        return {}
    items = spec.items() if isinstance(spec, dict) else enumerate(spec)
    dims = {}
    for d, s in items:
        if not -t.dim() <= d < t.dim():
            raise ExportError("ptc.export: dynamic_shapes for %s names dim %d of a %d-dim tensor"
                              % (path, d, t.dim()))
        dim = _dim_of(s)
        if dim:
            dims[d % t.dim()] = dim
            first = example.setdefault(dim[0], (path, t.shape[d]))
            if first[1] != t.shape[d]:
                raise ExportError("ptc.export: dynamic dim '%s' is %d in %s and %d in %s: one Dim "
                                  "stands for one size" % (dim[0], first[1], first[0], t.shape[d],
                                                           path))
    return dims


def _walk_shapes(value, spec, path, out, example):
    import torch

    if isinstance(value, torch.Tensor):
        out[id(value)] = _tensor_dims(value, spec, path, example)
    elif spec is None:
        return
    elif isinstance(value, (tuple, list)):
        for i, (v, s) in enumerate(zip(value, spec)):
            _walk_shapes(v, s, "%s[%d]" % (path, i), out, example)
    elif isinstance(value, dict):
        for k, v in value.items():
            _walk_shapes(v, spec.get(k), "%s[%r]" % (path, k), out, example)


def _dynamic_dims(model, args, kwargs, dynamic_shapes):
    """{id(tensor): {dim: (name, min, max)}} from torch.export-style dynamic_shapes:
    a dict keyed by the forward's parameter names, or a tuple in its order."""
    if dynamic_shapes is None:
        return {}
    bound = inspect.signature(model.forward).bind(*args, **kwargs)
    names = list(bound.arguments)
    if isinstance(dynamic_shapes, (tuple, list)):
        dynamic_shapes = dict(zip(names, dynamic_shapes))
    unknown = set(dynamic_shapes) - set(names)
    if unknown:
        raise ExportError("ptc.export: dynamic_shapes names %s, which %s.forward does not take "
                          "(it takes %s)" % (", ".join(sorted(unknown)), type(model).__name__,
                                             ", ".join(names)))
    out, example = {}, {}
    for name, value in bound.arguments.items():
        _walk_shapes(value, dynamic_shapes.get(name), name, out, example)
    return out


def _named_by_parameter(model, args, leaves):
    """Leaf paths under the forward's parameter names: args[0] -> x, kwargs['y'] -> y."""
    try:
        names = list(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return leaves

    def rename(path):
        m = re.match(r"args\[(\d+)\](.*)", path)
        if m and int(m.group(1)) < len(names) and int(m.group(1)) < len(args):
            return names[int(m.group(1))] + m.group(2)
        m = re.match(r"kwargs\['([^']*)'\](.*)", path)
        return m.group(1) + m.group(2) if m else path

    return [(rename(p), t) for p, t in leaves]


# ---- capture ------------------------------------------------------------------------------


def _capture(model, args, kwargs):
    """Runs the model once through ptc with fullgraph semantics; returns
    (graph, input tensors in graph order, graph outputs, result, events)."""
    import torch

    seen = []

    def backend(graph):
        def run(*tensors):
            outs = graph.run(*tensors)
            seen.append((graph, tensors, outs))
            return outs
        return run

    from ._graph import Graph

    compiled = _C._compile(model, lambda handle: backend(Graph(handle)), True, None, "default",
                           symint_results=True)
    with torch.no_grad():
        result = compiled(*args, **kwargs)
    events = compiled._events()
    if len(seen) != 1:
        raise ExportError("ptc.export: the forward ran %d graphs, expected one (does it compute "
                          "on tensors?)" % len(seen))
    graph, tensors, outs = seen[0]
    return graph, tensors, outs, result, events


_TYPE = re.compile(r"^(\w+)\[([^\]]*)\](\{[^}]*\})?\s*(\S*)")


def _parse_type(text):
    """'f32[s0,4] cpu' -> ('f32', ['s0', 4], 'cpu')."""
    m = _TYPE.match(text)
    dims = [d.strip() for d in m.group(2).split(",") if d.strip()]
    return m.group(1), [int(d) if re.fullmatch(r"-?\d+", d) else d for d in dims], m.group(4) or "cpu"


def _symbols(user_inputs, dyn, events):
    """The symbols of the user inputs' types with their ranges; an asked-for
    dynamic dim that the trace specialised is an error naming why."""
    fallback = [e.get("why") for e in events if e.get("kind") == "static_fallback"]
    ranges = {}
    for spec, tensor in user_inputs:
        for d, (name, lo, hi) in dyn.get(id(tensor), {}).items():
            size = spec["shape"][d]
            if not isinstance(size, str) or not re.fullmatch(r"s\d+", size):
                why = ("; " + fallback[0]) if fallback else ""
                raise ExportError("ptc.export: dim %d of %s (%s) was asked to be dynamic, but the "
                                  "trace specialised it to %s%s" % (d, spec["path"], name, size, why))
            r = ranges.setdefault(size, {"symbol": size, "dim": name, "min": 2, "max": None})
            if name not in r["dim"].split("="):
                warnings.warn("ptc.export: dynamic dims '%s' and '%s' had the same size in the "
                              "example call and the trace made them one symbol (%s): calls must "
                              "pass them equal; give them different example sizes to keep them "
                              "apart" % (r["dim"], name, size), stacklevel=4)
                r["dim"] += "=" + name
            r["min"] = max(r["min"], lo)  # ptc specialises sizes 0 and 1
            r["max"] = hi if r["max"] is None else (r["max"] if hi is None else min(r["max"], hi))
    return sorted(ranges.values(), key=lambda r: r["symbol"])


def _lift_inputs(model, graph, tensors, arg_leaves):
    """spec.json's inputs in graph order, and the lifted weights by graph name."""
    user = {id(t): (i, p) for i, (p, t) in enumerate(arg_leaves)}
    params = {id(p): ("parameter", n) for n, p in model.named_parameters()}
    params.update({id(b): ("buffer", n) for n, b in model.named_buffers()})
    inputs, weights = [], {}
    for (name, type_text), t in zip(graph.inputs, tensors):
        dtype, shape, device = _parse_type(type_text)
        entry = {"name": name, "dtype": dtype, "shape": shape, "device": device}
        if id(t) in user:
            entry.update(kind="user", path=user[id(t)][1], leaf=user[id(t)][0])
        else:
            kind, path = params.get(id(t), ("constant", name))
            entry.update(kind=kind, path=path)
            weights[name] = t.detach()
        inputs.append(entry)
    missing = [p for i, (p, t) in enumerate(arg_leaves)
               if not any(e.get("leaf") == i for e in inputs)]
    return inputs, weights, missing


def _symbols_of(expr):
    return {n.id for n in ast.walk(ast.parse(expr, mode="eval")) if isinstance(n, ast.Name)} - {
        "max", "min"}


def _size_output(path, value, inputs):
    """spec.json's entry of an int output computed from symbolic sizes."""
    given = {d for e in inputs if e["kind"] == "user" for d in e["shape"] if isinstance(d, str)}
    given = set().union(*(_symbols_of(d) for d in given))
    missing = sorted(_symbols_of(value.expr) - given)
    if missing:
        raise ExportError("ptc.export: output %s is the int %s, which reads %s, a size no input "
                          "gives" % (path, value.expr, ", ".join(missing)))
    return {"path": path, "symint": value.expr}


def _outputs(graph_outs, out_leaves, inputs, tensors):
    outputs, used = [], set()
    for path, t in out_leaves:
        if isinstance(t, SymIntResult):
            outputs.append(_size_output(path, t, inputs))
            continue
        k = next((k for k, o in enumerate(graph_outs) if o is t), None)
        if k is not None:
            outputs.append({"path": path, "graph_output": k})
            used.add(k)
            continue
        j = next((j for j, x in enumerate(tensors) if x is t), None)
        if j is None:
            raise ExportError("ptc.export: output %s is a tensor the graph neither computed nor "
                              "took as an input" % path)
        outputs.append({"path": path, "input": j})
    unused = len(graph_outs) - len(used)
    if unused:
        raise ExportError("ptc.export: the forward writes to %d tensor(s) that outlive the call "
                          "(buffers, arguments; e.g. BatchNorm in train mode): an exported program "
                          "is a pure inference function — call model.eval() first" % unused)
    return outputs


def export(model, example_args, example_kwargs=None, dynamic_shapes=None):
    """Captures model(*example_args, **example_kwargs) as one graph and
    returns a ptc.ExportedProgram (see the module's docstring)."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise TypeError("ptc.export expects an nn.Module, got %r" % (model,))
    args, kwargs = tuple(example_args), dict(example_kwargs or {})
    dyn = _dynamic_dims(model, args, kwargs, dynamic_shapes)
    # the marks go on aliases, so the caller's tensors stay unmarked
    alias = {}

    def aliased(v):
        """Contiguous aliases (the C loader runs other layouts as contiguous copies)."""
        if isinstance(v, torch.Tensor) and (id(v) in dyn or not v.is_contiguous()):
            a = v.contiguous() if not v.is_contiguous() else v.view_as(v)
            for d, (name, lo, hi) in dyn.get(id(v), {}).items():
                mark_dynamic(a, d, max(lo, 2), hi)
            alias[id(a)] = dyn.get(id(v), {})
            return a
        if isinstance(v, (tuple, list)):
            return type(v)(aliased(x) for x in v) if type(v) in (tuple, list) else v
        if isinstance(v, dict):
            return {k: aliased(x) for k, x in v.items()}
        return v

    args, kwargs = aliased(args), aliased(kwargs)
    arg_leaves = []
    in_tree = {"args": flatten(args, arg_leaves, "args", "argument"),
               "kwargs": flatten(kwargs, arg_leaves, "kwargs", "argument")}
    arg_leaves = _named_by_parameter(model, args, arg_leaves)
    graph, tensors, graph_outs, result, events = _capture(model, args, kwargs)
    out_leaves = []
    out_tree = flatten(result, out_leaves, "", "the result")
    inputs, weights, unused = _lift_inputs(model, graph, tensors, arg_leaves)
    user = [(e, arg_leaves[e["leaf"]][1]) for e in inputs if e["kind"] == "user"]
    spec = {"spec_version": SPEC_VERSION, "inputs": inputs, "symbols": _symbols(user, alias, events),
            "outputs": _outputs(graph_outs, out_leaves, inputs, tensors),
            "unused_inputs": unused, "in_tree": in_tree, "out_tree": out_tree,
            "module": _class_path(model)}
    return ExportedProgram(str(graph), weights, spec)


# ---- the exported program ------------------------------------------------------------------


def _check_input(e, t, bound, ranges, device):
    """The exported checks on one user input (compiler/export/model.c applies
    the same ones in C); device: the call's (module() runs a program exported
    on the CPU on CUDA inputs too)."""
    import torch

    where = "input %s" % e["path"]
    if not isinstance(t, torch.Tensor):
        raise ExportError("ptc: %s: expected a tensor, got %s" % (where, type(t).__name__))
    dtype = _tensorfile.PTIR_NAME.get(t.dtype)
    if dtype != e["dtype"]:
        raise ExportError("ptc: %s: expected dtype %s, got %s" % (where, e["dtype"], dtype))
    if t.device.type != device.type or device.index not in (None, t.device.index):
        raise ExportError("ptc: %s: expected a %s tensor (as the call's other inputs), got %s"
                          % (where, device, t.device))
    if t.dim() != len(e["shape"]):
        raise ExportError("ptc: %s: expected %d dims, got %d" % (where, len(e["shape"]), t.dim()))
    for d, (size, got) in enumerate(zip(e["shape"], t.shape)):
        want = bound.setdefault(size, got) if isinstance(size, str) else size
        if want != got:
            raise ExportError("ptc: %s: dim %d is %d, expected %s" % (
                where, d, got, "%s (= %d)" % (size, want) if isinstance(size, str) else want))
        r = ranges.get(size)
        if r and (got < r["min"] or (r["max"] is not None and got > r["max"])):
            raise ExportError("ptc: %s: size %d of dynamic dim '%s' (%s) is outside its exported "
                              "range [%d, %s]" % (where, got, r["dim"], r["symbol"], r["min"],
                                                  r["max"] or "inf"))


class ExportedProgram:
    """A model exported by ptc.export. module() runs it in Python;
    save(dir) writes the package that ptc.load, ptc-run --package and the
    C API (ptc_model_load) read."""

    def __init__(self, graph_text, weights, spec, package=None):
        self.graph_text = graph_text
        self.weights = weights  # graph input name -> tensor
        self.spec = spec
        self.package = package  # the folder ptc.load read it from, whose kernels module() runs

    @property
    def inputs(self):
        return [e for e in self.spec["inputs"] if e["kind"] == "user"]

    def __repr__(self):
        return "<ptc.ExportedProgram of %s: %d inputs, %d weights, %d outputs>" % (
            self.spec["module"], len(self.inputs), len(self.weights), len(self.spec["outputs"]))

    def module(self):
        """A callable nn.Module that checks its inputs against the export's
        specification and runs the compiled graph."""
        return _ExportedModule(self)

    def save(self, path, targets=("cpu",)):
        """Writes the package folder: graph.ptir, weights.bin, spec.json,
        kernels/<target>/ for each target ("cpu", "sm_80", "sm_90") and
        manifest.json with ptc's version and every file's checksum (SHA-256;
        the weights, a version-2 tensor file mapped at load, the XXH64 of
        each 4 MiB chunk)."""
        os.makedirs(path, exist_ok=True)
        if os.path.exists(os.path.join(path, "manifest.json")):
            os.unlink(os.path.join(path, "manifest.json"))
        with open(os.path.join(path, "graph.ptir"), "w") as f:
            f.write(self.graph_text)
        _tensorfile.write_tensors(os.path.join(path, "weights.bin"), self.weights, aligned=True)
        with open(os.path.join(path, "spec.json"), "w") as f:
            json.dump(self.spec, f, indent=1)
        _C._package_seal(os.fspath(path), list(targets))
        return path


def load(path):
    """The ExportedProgram of a package folder, verified as the C loader
    verifies it (manifest, ptc's version, every file's checksum)."""
    _C._package_verify(os.fspath(path))
    with open(os.path.join(path, "graph.ptir")) as f:
        graph_text = f.read()
    with open(os.path.join(path, "spec.json")) as f:
        spec = json.load(f)
    weights = dict(_tensorfile.read_tensors(os.path.join(path, "weights.bin")))
    return ExportedProgram(graph_text, weights, spec, os.fspath(path))


def _nn_module():
    import torch
    return torch.nn.Module


_CPU_ARG = re.compile(r"(?<=[(,=\s])cpu(?=[,)])")
_NODE_TYPE = re.compile(r"(\w+\[[^\]]*\](?:\{[^}]*\})?)(?:\s+(?:cpu|cuda(?::\d+)?)\b)?")


def on_device(graph_text, device):
    """The graph with its inputs, the tensors it makes (device=cpu arguments
    of arange, ones, to, ...) and every node's result on device: a program
    exported on the CPU, compiled for CUDA inputs. A node's type names its
    device (the printer leaves out the one its first tensor argument implies,
    which is the CPU for a creation op). Source text after @ is quoted and
    left as it is."""
    def move(line):
        code, at, source = line.partition("  @ ")
        args, colon, types = code.partition(" : ")
        types = _NODE_TYPE.sub(lambda m: "%s %s" % (m.group(1), device), types)
        return _CPU_ARG.sub(device, args) + colon + types + at + source

    return "\n".join(move(line) for line in graph_text.split("\n"))


class _ExportedModule(_nn_module()):
    """Runs the program on the device of the call's inputs: the one it was
    exported on, or, for a program exported on the CPU, a CUDA device (the
    graph compiled for it on the first such call, its weights moved there
    once). A program ptc.load read runs its package's own kernels (CPU
    objects, the PTX of the GPU's architecture) where they fit this machine,
    as ptc_model_load does; else they are compiled."""

    def __init__(self, program):
        super().__init__()
        self.program = program
        self._exported_on = next((e["device"] for e in program.spec["inputs"]), "cpu")
        self._on = {}  # device -> (compiled graph, weights there)
        self._ranges = {r["symbol"]: r for r in program.spec["symbols"]}

    def _for_device(self, device):
        key = str(device)
        if key not in self._on:
            text, weights = self.program.graph_text, self.program.weights
            if key != self._exported_on:
                text = on_device(text, key)
                weights = {k: t.to(device) for k, t in weights.items()}
            package = self.program.package
            kernels = package and _C._package_kernels(package, device.type)
            self._on[key] = (_C._compile_ptir(text, kernels) if kernels else _C._compile_ptir(text),
                             weights)
        return self._on[key]

    def _call_device(self, user):
        """The device of the call: its inputs', when they are on CUDA and the
        program was exported on the CPU; else the exported one."""
        import torch

        first = next((t.device for t in user if isinstance(t, torch.Tensor)), None)
        if first is not None and first.type == "cuda" and self._exported_on == "cpu":
            return torch.device("cuda", first.index if first.index is not None else 0)
        return torch.device(self._exported_on)

    def forward(self, *args, **kwargs):
        spec = self.program.spec
        leaves = []
        tree = {"args": flatten(tuple(args), leaves, "args", "argument"),
                "kwargs": flatten(dict(kwargs), leaves, "kwargs", "argument")}
        if _skeleton(tree) != _skeleton(spec["in_tree"]):
            raise ExportError("ptc: the call's arguments differ in structure or constants from "
                              "the exported call's")
        user = [leaves[e["leaf"]][1] for e in spec["inputs"] if e["kind"] == "user"]
        device = self._call_device(user)
        bound, checked = {}, []
        for e in spec["inputs"]:
            if e["kind"] == "user":
                t = leaves[e["leaf"]][1]
                _check_input(e, t, bound, self._ranges, device)
                checked.append(t.contiguous())
        compiled, weights = self._for_device(device)
        users = iter(checked)
        full = [next(users) if e["kind"] == "user" else weights[e["name"]] for e in spec["inputs"]]
        outs = _C._run_compiled(compiled, tuple(full))

        def output(o):
            if "graph_output" in o:
                return outs[o["graph_output"]]
            return full[o["input"]] if "input" in o else size_value(o["symint"], bound)

        results = [output(o) for o in spec["outputs"]]
        return unflatten(spec["out_tree"], results)
