"""ptc.explain(fn)(*args, **kwargs): what ptc did with one call.

Returns an ExplainOutput: the graphs captured (ptc.Graph), the graph breaks
(code, reason, source line, inlined stack, explanation, hint), recompiles and
their guards, the guards of every graph, compile times, skipped frames and
fallbacks. str() of it is the report ptexplain prints for the same call (the
same C code writes both, from the same measurements: measured_json);
.as_dict() is the data.
"""
import contextlib
import json
import os
import platform
import sys
import tempfile
import time

from . import _C, _notices
from ._graph import Graph


def measured_json(measured, notes=()):
    """The JSON ptexplain's report is built from: what ptc measured
    (ptc._C._measured() or a scope of ptc.explain), with every event's graph
    as .ptir text and its stats, and the notes (what was not acted on)."""
    events = []
    for ev in measured["events"] or []:
        d = dict(ev)
        st = d.get("stats")
        d["stats"] = _C._entry_stats(st) if st is not None else None
        g = d.pop("graph", None)
        d["ptir"] = g.ptir() if g is not None else None
        d["guards"] = len(d.get("guards") or [])
        events.append(d)
    torch = sys.modules.get("torch")
    versions = "python %s, torch %s, ptc %s" % (platform.python_version(),
                                                getattr(torch, "__version__", "not loaded"),
                                                _C.PTC_VERSION)
    eager = sorted((k, v[0], v[1], v[2]) for k, v in (measured["eager"] or {}).items())
    notes = list(notes) + [n for n in _notices.recorded() if n not in notes]
    return json.dumps({"calls": measured["calls"], "call_ms": measured["call_ms"],
                       "compile_ms": measured["compile_ms"], "graph_ms": measured["graph_ms"],
                       "eager": eager, "events": events, "notes": notes, "versions": versions},
                      default=repr)


class ExplainOutput:
    def __init__(self, events, result, report=""):
        self.result = result
        self.report = report
        self.graphs = []
        self.breaks = []
        self.recompiles = []
        self.guards = []
        self.compile_times = []
        self.skipped = []
        self.fallbacks = []
        self.limits = []
        self.pieces = []  # graph_pieces events: a graph cut into pieces (DDP buckets)
        self.ops_per_graph = []
        self.autograd_fallback = False
        for ev in events:
            kind = ev.get("kind")
            if kind == "compile":
                handle = ev.get("graph")
                if handle is not None:
                    g = Graph(handle)
                    self.graphs.append(g)
                    self.ops_per_graph.append(g.ops())
                if ev.get("break"):
                    self.breaks.append(dict(ev["break"], frame=ev["frame"]))
                self.guards.append(list(ev.get("guards") or []))
                self.compile_times.append({"frame": ev["frame"], "id": ev["id"],
                                           "ms": ev["compile_ms"], "reason": ev["reason"]})
                self.skipped.extend(ev.get("skipped") or [])
            elif kind == "recompile":
                self.recompiles.append({"frame": ev["frame"], "guard": ev["guard"]})
            elif kind == "untraceable":
                if ev.get("break"):
                    self.breaks.append(dict(ev["break"], frame=ev["frame"]))
                self.skipped.append(ev["frame"])
            elif kind == "recompile_limit":
                self.limits.append(ev)
            elif kind == "graph_pieces":
                self.pieces.append(ev)
            elif kind == "skipped":
                self.skipped.append(ev["frame"])
            elif kind in ("fallback", "backend_fallback"):
                self.fallbacks.append(ev)
            elif kind == "autograd_fallback":
                self.autograd_fallback = True
                self.fallbacks.append(dict(ev, error="graph %d of %s needs gradients: it ran through torch "
                                                     "ops so that autograd works (%s)"
                                                     % (ev["id"], ev["frame"], ev.get("why", ""))))

    @property
    def graph_count(self):
        return len(self.graphs)

    @property
    def break_count(self):
        return len(self.breaks)

    @property
    def recompile_count(self):
        return len(self.recompiles)

    def as_dict(self):
        return {
            "graph_count": self.graph_count,
            "break_count": self.break_count,
            "graphs": [str(g) for g in self.graphs],
            "breaks": self.breaks,
            "recompiles": self.recompiles,
            "guards": self.guards,
            "compile_times": self.compile_times,
            "skipped": self.skipped,
            "fallbacks": list(self.fallbacks),
            "pieces": list(self.pieces),
        }

    def __str__(self):
        return self.report


@contextlib.contextmanager
def _trace_dir():
    """The user's PTC_TRACE_DIR, else a new temporary one for the call (the
    report reads each compile's kernels.txt and metrics.json from it). The
    temporary one is left in place: the compiled function writes the trace's
    index when it is freed, which may be after the call."""
    if os.environ.get("PTC_TRACE_DIR"):
        yield
        return
    os.environ["PTC_TRACE_DIR"] = tempfile.mkdtemp(prefix="ptc-explain.")
    try:
        yield
    finally:
        os.environ.pop("PTC_TRACE_DIR", None)


def explain(fn, *, backend="ptc"):
    """explain(fn)(*args, **kwargs) runs fn once under a fresh ptc compile
    (ptc.compile's default backend unless told otherwise) and reports graphs,
    breaks, recompiles, guards and timings; str() of the result is the report
    ptexplain prints."""
    from . import compile
    from ._module import OptimizedModule

    if isinstance(fn, OptimizedModule):
        fn = fn._orig_mod
    name = getattr(fn, "__qualname__", None) or type(fn).__name__

    def run(*args, **kwargs):
        compiled = compile(fn, backend=backend)
        target = getattr(compiled, "_ptc_compiled", compiled)
        with _trace_dir():
            _C._measure_scope(True)
            t0 = time.perf_counter()
            try:
                result = compiled(*args, **kwargs)
            finally:
                wall_ms = (time.perf_counter() - t0) * 1000
                measured = _C._measure_scope(False)
            report = _C._explain_report(measured_json(measured), "ptc.explain(%s)" % name, wall_ms)
            events = target._events()
        return ExplainOutput(events, result, report)

    return run


# ---- ptexplain in the processes a script starts ----------------------------------------------
#
# A distributed script starts its ranks as new processes (torch.multiprocessing.spawn,
# torchrun): ptexplain's bootstrap does not run in them. ptexplain therefore exports
# PTC_EXPLAIN_CHILD=1 and puts ptc/_explain_hook (a sitecustomize) first on PYTHONPATH;
# in a process it starts, once torch is imported, torch.compile is routed to ptc and ptc
# measures, and at exit the measurements go to measured_<pid>.json beside the process's
# compiles in the trace directory (its rank_N folder), where ptexplain reads them.
_TORCH_BACKENDS = ("inductor", "aot_eager", "cudagraphs")
_STARTED = time.perf_counter()  # a process's "script" time counts from here


def route_torch_compile(torch, note):
    """Replaces torch.compile by a function with its signature that calls
    ptc.compile; note(text) records a backend ptc replaced."""
    from . import compile as ptc_compile

    def compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None,
                options=None, disable=False):
        if disable:
            return model if model is not None else (lambda m: m)
        if model is None:
            return lambda m: compile(m, fullgraph=fullgraph, dynamic=dynamic, backend=backend,
                                     mode=mode, options=options)
        if not isinstance(backend, str) or backend not in ("ptc", "eager", "reference") + _TORCH_BACKENDS:
            note("torch.compile(backend=%s) ran with ptc's compiled backend"
                 % getattr(backend, "__name__", repr(backend)))
            backend = "ptc"
        return ptc_compile(model, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                           options=options)

    compile.__doc__ = "torch.compile, routed to ptc.compile by ptexplain."
    torch.compile = compile


def explain_children():
    """Called by ptexplain in its own process: the Python processes the
    script starts are measured too (see above). A rank made by fork inherits
    ptexplain's own set-up and writes its measurements when it exits."""
    pkg = os.path.dirname(os.path.abspath(__file__))
    path = [os.path.join(pkg, "_explain_hook"), os.path.dirname(pkg)]
    if os.environ.get("PYTHONPATH"):
        path.append(os.environ["PYTHONPATH"])
    os.environ["PYTHONPATH"] = os.pathsep.join(path)
    os.environ["PTC_EXPLAIN_CHILD"] = "1"
    os.register_at_fork(after_in_child=_write_at_exit)


_notes_here = []


def measure_this_process():
    """In a process a script under ptexplain started (PTC_EXPLAIN_CHILD; the
    hook calls this once torch is imported)."""
    import torch

    _C._measure(True)
    route_torch_compile(torch, lambda text: _notes_here.append(text) if text not in _notes_here else None)
    _write_at_exit()


def _write_at_exit():
    import atexit

    atexit.register(write_measured)
    mp = sys.modules.get("multiprocessing.util")  # a forked process exits through os._exit
    if mp is not None:
        mp.Finalize(None, write_measured, exitpriority=0)


def write_measured(notes=None):
    """Writes this process's measurements as measured_<pid>.json into the
    folder of its first compile's trace (once; nothing if it compiled
    nothing). The file holds the JSON ptexplain builds a report from, with
    the process's rank (from its rank_N folder), pid, command line and the
    time since ptc was imported."""
    if getattr(write_measured, "done", False):
        return
    write_measured.done = True
    measured = _C._measured()
    folders = [os.path.dirname(ev["trace"]) for ev in measured["events"] or [] if ev.get("trace")]
    if not folders:
        return
    folder = folders[0]
    name = os.path.basename(folder)
    rank = int(name[5:]) if name.startswith("rank_") and name[5:].isdigit() else -1
    data = json.loads(measured_json(measured, _notes_here if notes is None else notes))
    data.update(rank=rank, pid=os.getpid(), argv=" ".join(sys.argv),
                wall_ms=(time.perf_counter() - _STARTED) * 1000)
    path = os.path.join(folder, "measured_%d.json" % os.getpid())
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)
