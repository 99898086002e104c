"""torch.compile(model, backend="ptc"): Dynamo's front end, ptc's compiler.

Dynamo captures the program (its bytecode analysis, its guards, its graph
breaks) and hands each graph to this backend as a torch.fx.GraphModule.
ptc compiles the GraphModule's generated forward with its own front end,
which records the FX graph's torch calls into ptc's captured IR, then runs
the same pipeline as ptc.compile (prims, loops, fused kernels, CPU or CUDA).
A call ptc cannot record becomes a ptc graph break (reported like any
other, see ``man ptc``), so a graph ptc can only partly compile still runs;
under torch.compile(fullgraph=True) the first such break is a notice.

Dynamo's symbolic sizes (dynamic=True, or its automatic dynamic after a size
change) reach ptc as symbolic sizes of its own: a dimension Dynamo made
symbolic is marked dynamic for ptc's trace, and each SymInt graph input is
read back from where Dynamo took it -- the size of a tensor input that has
that symbol -- so ptc compiles one graph for all sizes instead of
specialising on the int. A SymInt that is no tensor's size (an int argument
Dynamo made dynamic) reaches ptc as the size of a zero-byte tensor (0, n) made per
call, its "size carrier", since ptc's symbols are sizes of tensor inputs.

After ``pip install``, torch finds this backend through the
``torch_dynamo_backends`` entry point; from a build tree, call
``ptc._dynamo.register()`` once.
"""


def ptc_backend(gm, example_inputs, mode=None, options=None):
    """A Dynamo backend: compiles one FX graph with ptc.

    torch.compile passes its ``mode=`` or ``options=`` here; they mean what
    they mean to ptc.compile.
    """
    from . import compile as ptc_compile
    try:  # a lazy GraphModule's forward writes its code on the first call
        from torch.fx._lazy_graph_module import _LazyGraphModule
        if isinstance(gm, _LazyGraphModule):
            _LazyGraphModule.force_recompile(gm)
    except ImportError:
        pass
    plan = _SymbolicPlan(_placeholder_values(gm, example_inputs))
    if not plan.symbolic:
        run = ptc_compile(gm.forward, mode=mode or "default", options=options)
    else:
        run = plan.compile(gm.forward, ptc_compile, mode or "default", options)
    return _noting_breaks(run) if _dynamo_fullgraph() else run


def _dynamo_fullgraph():
    """Whether Dynamo is capturing this graph for torch.compile(fullgraph=True)
    (its translator's one_graph, read while it calls the backend)."""
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator
        return bool(getattr(InstructionTranslator.current_tx(), "one_graph", False))
    except (ImportError, AttributeError, AssertionError, RuntimeError):
        return False


def _noting_breaks(run):
    """run, which after each call looks at the compiles it made: the first
    graph break of ptc's own inside a graph Dynamo captured whole for
    fullgraph=True gives one notice per process. ptc does not raise there:
    torch.compile with Inductor would have run the graph whole, so the break
    costs speed, not correctness, and the program goes on."""
    from . import _notices

    compiled = getattr(run, "ptc_compiled", run)
    seen = [0]  # the events looked at so far

    def call(*args):
        out = run(*args)
        if seen[0] >= 0:
            events = compiled._events()
            for ev in events[seen[0]:]:
                brk = ev.get("break") if ev.get("kind") == "compile" else None
                if brk and not _noting_breaks.noted:
                    _noting_breaks.noted = True
                    _notices.not_acted_on(
                        "torch.compile(fullgraph=True): ptc split a graph that Dynamo captured "
                        "whole, at %s %s (%s:%s): ptc does not raise for its own graph breaks "
                        "inside Dynamo's graphs, it runs the pieces (ptexplain lists the break)."
                        % (brk.get("code"), brk.get("reason"), brk.get("file"), brk.get("line")))
            seen[0] = -1 if _noting_breaks.noted else len(events)
        return out

    return call


_noting_breaks.noted = False


def _placeholder_values(gm, example_inputs):
    """What Dynamo traced each input as: its fake tensor (with symbolic
    sizes) or SymInt from the placeholder's meta; the example input itself
    where the meta has none (example inputs are real, concrete tensors)."""
    values = [n.meta.get("example_value", n.meta.get("val"))
              for n in gm.graph.nodes if n.op == "placeholder"]
    if len(values) != len(example_inputs):
        return list(example_inputs)
    return [e if v is None else v for v, e in zip(values, example_inputs)]


def _free_symbols(v):
    """The symbols of a SymInt (a frozenset of names), empty for a plain int."""
    import torch
    if not isinstance(v, torch.SymInt):
        return frozenset()
    return frozenset(str(s) for s in v.node.expr.free_symbols)


class _SymbolicPlan:
    """How the graph's inputs reach ptc when Dynamo's example inputs have
    symbolic sizes: which tensor dims ptc's trace makes symbolic, and where
    each SymInt input is read from (a tensor input's size, or a carrier)."""

    def __init__(self, example_inputs):
        import torch
        self.tensors = []    # indices of tensor inputs, passed to ptc as they are
        self.dynamic = {}    # position among ptc's inputs -> dims Dynamo made symbolic
        sizes = {}           # symbol expression -> "a<k>.size(d)"
        for i, e in enumerate(example_inputs):
            if isinstance(e, torch.Tensor):
                dims = [d for d, n in enumerate(e.shape) if _free_symbols(n)]
                if dims:
                    self.dynamic[len(self.tensors)] = dims
                for d in dims:
                    sizes.setdefault(str(e.shape[d].node.expr), "a%d.size(%d)" % (len(self.tensors), d))
                self.tensors.append(i)
        self.carried = []    # indices of SymInt inputs that are no tensor's size
        self.others = []     # indices of other inputs (not symbolic), passed as they are
        self.call = []       # what the FX forward receives, one expression per input
        for i, e in enumerate(example_inputs):
            if isinstance(e, torch.Tensor):
                self.call.append("a%d" % self.tensors.index(i))
            elif isinstance(e, torch.SymInt) and str(e.node.expr) in sizes:
                self.call.append(sizes[str(e.node.expr)])
            elif isinstance(e, torch.SymInt):
                self.call.append("c%d.size(1)" % len(self.carried))
                self.carried.append(i)
            else:
                self.call.append("o%d" % len(self.others))
                self.others.append(i)
        self.symbolic = bool(self.dynamic or self.carried)

    def compile(self, forward, ptc_compile, mode, options):
        """The function Dynamo calls: it drops the SymInt inputs, marks the
        symbolic dims for ptc's trace and calls ptc's compile of a function
        that reads each symbol back from a size."""
        import torch
        params = (["a%d" % k for k in range(len(self.tensors))] +
                  ["c%d" % k for k in range(len(self.carried))] +
                  ["o%d" % k for k in range(len(self.others))])
        source = ("def dynamo_graph(%s):\n    return forward(%s)\n"
                  % (", ".join(params), ", ".join(self.call)))
        scope = {"forward": forward}
        exec(compile(source, "<ptc dynamo graph>", "exec"), scope)
        compiled = ptc_compile(scope["dynamo_graph"], mode=mode, options=options)
        tensors, carried, others = self.tensors, self.carried, self.others
        marks = list(self.dynamic.items())
        marks += [(len(tensors) + k, [1]) for k in range(len(carried))]

        def run(*args):
            inputs = [args[i] for i in tensors]
            inputs += [torch.empty((0, args[i]), dtype=torch.uint8) for i in carried]
            inputs += [args[i] for i in others]
            marked = _mark(inputs, marks)
            try:
                return compiled(*inputs)
            finally:
                for t in marked:
                    del t._dynamo_dynamic_indices
        run.ptc_compiled = compiled
        run.ptc_source = source
        return run


def _mark(inputs, marks):
    """Marks the dims Dynamo made symbolic (ptc's trace reads the marks
    torch._dynamo.mark_dynamic leaves); returns the tensors it marked, whose
    marks the caller removes after the call, so the user's tensors keep
    none. A tensor the user marked keeps the user's marks."""
    marked = []
    for k, dims in marks:
        t = inputs[k]
        if not hasattr(t, "_dynamo_dynamic_indices"):
            t._dynamo_dynamic_indices = set(dims)
            marked.append(t)
    return marked


def register():
    """Registers "ptc" with torch._dynamo (needed only without pip install)."""
    from torch._dynamo.backends.registry import register_backend, list_backends
    if "ptc" not in list_backends(exclude_tags=()):
        register_backend(name="ptc", compiler_fn=ptc_backend)
