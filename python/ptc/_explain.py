"""ptc.explain(fn)(*args, **kwargs): what ptc did with one call.

Returns an ExplainOutput: the graphs captured (ptc.Graph), the graph breaks
(code, reason, source line, inlined stack, explanation, hint), recompiles and
their guards, the guards of every graph, compile times, skipped frames and
fallbacks. str() of it is the report ptexplain prints; .as_dict() is the data.
"""
from ._graph import Graph


class ExplainOutput:
    def __init__(self, events, result):
        self.result = result
        self.graphs = []
        self.breaks = []
        self.recompiles = []
        self.guards = []
        self.compile_times = []
        self.skipped = []
        self.fallbacks = []
        self.limits = []
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
        }

    def __str__(self):
        lines = ["Graph count: %d" % self.graph_count, "Graph break count: %d" % self.break_count,
                 "Op count: %d" % sum(len(o) for o in self.ops_per_graph)]
        for i, b in enumerate(self.breaks):
            lines.append("Break %d: %s %s: %s" % (i + 1, b["code"], b["reason"], b["detail"]))
            lines.append('  File "%s", line %d, column %d' % (b["file"], b["line"], b["col"]))
            if b["text"]:
                lines.append("    " + b["text"])
                width = max(1, b["endcol"] - b["col"]) if b["endcol"] > b["col"] else 1
                lines.append("    " + " " * max(0, b["col"] - 1) + "^" * width)
            if b.get("stack"):
                lines.append("  stack: " + b["stack"])
            lines.append("  hint: " + b["hint"])
        for r in self.recompiles:
            lines.append("Recompile of %s: %s" % (r["frame"], r["guard"]))
        for f in self.fallbacks:
            lines.append("Fallback: %s" % f.get("error", ""))
        if self.skipped:
            lines.append("Skipped frames: " + ", ".join(map(str, self.skipped)))
        lines.append("Guards: %d" % sum(len(g) for g in self.guards))
        return "\n".join(lines)


def explain(fn, *, backend="eager"):
    """explain(fn)(*args, **kwargs) runs fn once under a fresh ptc compile and
    reports graphs, breaks, recompiles, guards and timings."""
    from . import compile
    from ._module import OptimizedModule

    if isinstance(fn, OptimizedModule):
        fn = fn._orig_mod

    def run(*args, **kwargs):
        compiled = compile(fn, backend=backend)
        target = getattr(compiled, "_ptc_compiled", compiled)
        result = compiled(*args, **kwargs)
        return ExplainOutput(target._events(), result)

    return run
