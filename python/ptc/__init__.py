"""ptc: a torch.compile-style compiler with its own bytecode interpreter.

    import ptc
    model = ptc.compile(model)            # an nn.Module: behaves like the module
    f = ptc.compile(f, backend="eager")   # a function
    @ptc.compile(fullgraph=True)          # a decorator, with or without options
    def g(x): ...

ptc runs the function's bytecode in its own interpreter (written in C),
records the tensor operations into a graph, guards the Python values it relied
on, and splits the graph where it must run Python for real (a graph break).
See ``man ptc`` (ptc.7) for the break codes, environment variables and files.
"""
import types as _types

from . import _C
from ._config import config
from ._dynamic import mark_dynamic, mark_static, maybe_mark_dynamic
from ._explain import ExplainOutput, explain
from ._graph import Graph
from ._module import OptimizedModule, wrap_module

__all__ = ["compile", "reset", "disable", "config", "explain", "Graph", "GraphBreakError",
           "ExplainOutput", "break_codes", "mark_dynamic", "mark_static", "maybe_mark_dynamic"]
__version__ = _C.PTC_VERSION

GraphBreakError = _C.GraphBreakError

_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def _backend_arg(backend):
    if callable(backend) and not isinstance(backend, str):
        return lambda handle: backend(Graph(handle))
    if backend in ("inductor", "aot_eager", "cudagraphs"):  # torch.compile spellings
        return "ptc" if backend == "inductor" else "eager"
    return backend


def compile(model_or_fn=None, *, mode="default", dynamic=None, fullgraph=False, backend="ptc",
            options=None):
    """Compiles a function or an nn.Module; usable as a call or a decorator.

    backend: "ptc" (the compiled pipeline), "eager" (the captured graph run
    through torch ops), "reference" (ptc's reference interpreter) or a callable
    that receives a ptc.Graph and returns the function to run.
    fullgraph: raise GraphBreakError at the first graph break instead of
    splitting the graph. dynamic: None (the default) compiles static sizes
    first and makes a dimension symbolic when a guard fails only because its
    size changed; True makes every size symbolic from the first call (sizes 0
    and 1 stay specialised); False specialises every size. Tensors marked with
    ptc.mark_dynamic / mark_static (or torch._dynamo's) override the default
    per dimension. options: {"recompile_limit": n} or
    {"trace_dir": path} apply globally.
    """
    if model_or_fn is None:
        return lambda f: compile(f, mode=mode, dynamic=dynamic, fullgraph=fullgraph,
                                 backend=backend, options=options)
    if dynamic not in (None, True, False):
        raise ValueError("ptc.compile: dynamic must be None, True or False, got %r" % (dynamic,))
    if mode not in _MODES and mode is not None:
        raise ValueError("ptc.compile: unknown mode %r (expected one of %s)" % (mode, ", ".join(_MODES)))
    if options:
        config.apply_options(options)
    be = _backend_arg(backend)
    import torch
    if isinstance(model_or_fn, torch.nn.Module):
        return wrap_module(model_or_fn, be, bool(fullgraph), dynamic, mode or "default")
    if isinstance(model_or_fn, _types.MethodType):
        compiled = _compile_function(model_or_fn.__func__, be, fullgraph, dynamic, mode)
        return _types.MethodType(compiled, model_or_fn.__self__)
    if not callable(model_or_fn):
        raise TypeError("ptc.compile expects a function or an nn.Module, got %r" % (model_or_fn,))
    return _compile_function(model_or_fn, be, fullgraph, dynamic, mode)


def _compile_function(fn, be, fullgraph, dynamic, mode):
    """The compiled function, named as fn (a bound method of it reads its __name__)."""
    compiled = _C._compile(fn, be, bool(fullgraph), dynamic, mode or "default")
    for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
        try:
            setattr(compiled, attr, getattr(fn, attr))
        except (AttributeError, TypeError):
            pass
    return compiled


def reset():
    """Drops every compiled entry of every compiled function (like torch._dynamo.reset).

    Safe while compiled calls are in flight (other threads, or the function
    that calls it): they finish with the entries they started with.
    """
    _C._reset()


def disable(fn=None):
    """Marks a function as never traced into: calls to it run eagerly (a PTC-B014 break)."""
    if fn is None:
        return disable
    _C._disable(fn)
    return fn


def _drained_generator(items):
    """What a generator expression that ptc ran while tracing hands back: a
    generator over the values it yielded (they had no side effects)."""
    yield from items


def break_codes():
    """The graph-break taxonomy: a list of dicts (code, name, reason, explanation, hint)."""
    return _C._break_table()
