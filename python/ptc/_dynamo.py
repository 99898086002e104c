"""torch.compile(model, backend="ptc"): Dynamo's front end, ptc's compiler.

Dynamo captures the program (its bytecode analysis, its guards, its graph
breaks) and hands each graph to this backend as a torch.fx.GraphModule.
ptc compiles the GraphModule's generated forward with its own front end,
which records the FX graph's torch calls into ptc's captured IR, then runs
the same pipeline as ptc.compile (prims, loops, fused kernels, CPU or CUDA).
A call ptc cannot record becomes a ptc graph break (reported like any
other, see ``man ptc``), so a graph ptc can only partly compile still runs.

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
    return ptc_compile(gm.forward, mode=mode or "default", options=options)


def register():
    """Registers "ptc" with torch._dynamo (needed only without pip install)."""
    from torch._dynamo.backends.registry import register_backend, list_backends
    if "ptc" not in list_backends(exclude_tags=()):
        register_backend(name="ptc", compiler_fn=ptc_backend)
