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

from . import _C, _distributed, _notices
from ._config import config
from ._dynamic import mark_dynamic, mark_static, maybe_mark_dynamic
from ._explain import ExplainOutput, explain
from ._export import Dim, ExportedProgram, ExportError, export, load
from ._graph import Graph
from ._module import OptimizedModule, wrap_module

__all__ = ["compile", "reset", "disable", "set_stance", "config", "explain", "Graph", "GraphBreakError",
           "ExplainOutput", "break_codes", "mark_dynamic", "mark_static", "maybe_mark_dynamic",
           "export", "load", "ExportedProgram", "ExportError", "Dim", "PartialRunError"]
__version__ = _C.PTC_VERSION

GraphBreakError = _C.GraphBreakError
PartialRunError = _C.PartialRunError

_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# reduce-overhead records CUDA graphs (_cudagraphs.py; on the CPU a notice at
# the first CPU graph says it has no effect there); the max-autotune modes time
# each kernel's launch configuration (runtime/autotune.c). What they still lack:
_AUTOTUNE_GAP = ("it tunes each kernel's code (vector width, reduction unroll) and parallel "
                 "split (CPU) or form and vectorised entry (CUDA), and times torch's mm against "
                 "ptc's own GEMM for each float matmul on the CPU; on CUDA matmuls run in "
                 "torch's (cuBLAS) with no other implementation to choose")
_MODE_GAPS = {
    "max-autotune": _AUTOTUNE_GAP,
    "max-autotune-no-cudagraphs": _AUTOTUNE_GAP,
}
_BACKEND_ALIASES = {  # torch.compile's backend names -> (ptc backend, what differs)
    "inductor": ("ptc", None),
    "aot_eager": ("eager", "ptc runs the captured graph through torch ops (its 'eager' "
                           "backend); there is no AOT autograd trace"),
    "cudagraphs": ("eager", "ptc runs the captured graph through torch ops (its 'eager' "
                            "backend) and records no CUDA graphs"),
}


def _backend_arg(backend):
    if callable(backend) and not isinstance(backend, str):
        return lambda handle: backend(Graph(handle))
    if backend in _BACKEND_ALIASES:
        ptc_backend, gap = _BACKEND_ALIASES[backend]
        if gap:
            _notices.not_acted_on("backend=%r: %s." % (backend, gap))
        return ptc_backend
    return backend


def _mode_arg(mode):
    if mode is None:
        return "default"
    if mode not in _MODES:
        raise ValueError("ptc.compile: unknown mode %r (expected one of %s)" % (mode, ", ".join(_MODES)))
    if mode in _MODE_GAPS:
        _notices.not_acted_on("mode=%r: %s." % (mode, _MODE_GAPS[mode]))
    return mode


# Inductor's options (those torch.compile documents) whose effect ptc offers
# another way: the warning for the key says which.
_INDUCTOR_OPTION_EQUIVALENTS = {
    "triton.cudagraphs": "mode='reduce-overhead'",
    "max_autotune": "mode='max-autotune-no-cudagraphs'",
    "trace.enabled": "options={'trace_dir': DIR} or PTC_TRACE_DIR",
    "trace.graph_diagram": "ptview --render FILE.svg on the trace directory",
}


def _options_arg(options):
    """ptc's own settings apply (globally, as ptc.config); every other key,
    such as Inductor's, is named in a warning of its own, once per process
    whatever other keys come with it."""
    ours = {k: v for k, v in dict(options).items() if k.replace(".", "_") in dir(config)}
    for key in sorted(str(k) for k in options if k not in ours):
        instead = _INDUCTOR_OPTION_EQUIVALENTS.get(key)
        _notices.not_acted_on("options[%r] is not a ptc setting: ptc does not act on it%s "
                              "(ptc's settings are %s)." % (
                                  key, "; ptc does the same with " + instead if instead else "",
                                  ", ".join(sorted(dir(config)))))
    config.apply_options(ours)


def compile(model_or_fn=None, *, mode="default", dynamic=None, fullgraph=False, backend="ptc",
            options=None, disable=False):
    """Compiles a function or an nn.Module; usable as a call or a decorator.

    backend: "ptc" (the compiled pipeline), "eager" (the captured graph run
    through torch ops), "reference" (ptc's reference interpreter) or a callable
    that receives a ptc.Graph and returns the function to run; torch.compile's
    "inductor" means "ptc", "aot_eager" and "cudagraphs" mean "eager" (with a
    warning). fullgraph: raise GraphBreakError at the first graph break
    instead of splitting the graph. disable=True returns model_or_fn as it is.
    dynamic: None (the default) compiles static sizes first and makes a
    dimension symbolic when a guard fails only because its size changed; True
    makes every size symbolic from the first call (sizes 0 and 1 stay
    specialised); False specialises every size. Tensors marked with
    ptc.mark_dynamic / mark_static (or torch._dynamo's) override the default
    per dimension. options: ptc.config settings ({"recompile_limit": n},
    {"trace_dir": path}) apply globally. mode="reduce-overhead" records each
    compiled CUDA graph into a CUDA graph and replays it (on the CPU it has no
    effect, with a notice); "max-autotune-no-cudagraphs" times each kernel's
    launch configuration at its first run and caches the winner on disk;
    "max-autotune" does both. What ptc does not act on -- options that are
    not ptc settings, parts of a mode it lacks -- gives one warning per
    process and a line in ptexplain's Notes.
    """
    if model_or_fn is None:
        return lambda f: compile(f, mode=mode, dynamic=dynamic, fullgraph=fullgraph,
                                 backend=backend, options=options, disable=disable)
    if disable:
        return model_or_fn
    if dynamic not in (None, True, False):
        raise ValueError("ptc.compile: dynamic must be None, True or False, got %r" % (dynamic,))
    mode = _mode_arg(mode)
    if options:
        _options_arg(options)
    be = _backend_arg(backend)
    _distributed.watch_ranks()
    import torch
    if _distributed.is_ddp(model_or_fn):
        return _distributed.wrap_ddp(
            model_or_fn, lambda m: wrap_module(m, be, bool(fullgraph), dynamic, mode))
    if isinstance(model_or_fn, torch.nn.Module):
        _distributed.prepare_fsdp1(model_or_fn)
        return wrap_module(model_or_fn, be, bool(fullgraph), dynamic, mode)
    if isinstance(model_or_fn, _types.MethodType):
        from . import _optim
        step = _optim.compiled_step_of(model_or_fn)
        if step is not None:  # an optimizer's step: ptc's compiled update (_optim.py)
            return step
        compiled = _compile_function(model_or_fn.__func__, be, fullgraph, dynamic, mode)
        return _types.MethodType(compiled, model_or_fn.__self__)
    if not callable(model_or_fn):
        raise TypeError("ptc.compile expects a function or an nn.Module, got %r" % (model_or_fn,))
    return _compile_function(model_or_fn, be, fullgraph, dynamic, mode)


def _compile_function(fn, be, fullgraph, dynamic, mode):
    """The compiled function, named as fn (a bound method of it reads its __name__)."""
    compiled = _C._compile(fn, be, bool(fullgraph), dynamic, mode)
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


class set_stance:
    """Sets what compiled functions do about compiling, as torch.compiler.set_stance:
    a call (lasts until the next), a context manager or a decorator.

    "default": compile, and recompile when a guard fails. "force_eager": run
    every compiled function eagerly. "eager_on_recompile": use what is
    compiled, run eagerly where a recompile would be needed.
    "fail_on_recompile": the same, but raise RuntimeError instead.
    "eager_then_compile" (and "aot_eager_then_compile", which ptc runs the
    same way, with a warning): each function's first call runs eagerly.
    skip_guard_eval_unsafe and force_backend are not acted on (a warning).
    """

    def __init__(self, stance="default", *, skip_guard_eval_unsafe=False, force_backend=None):
        if stance == "aot_eager_then_compile":
            _notices.not_acted_on("stance 'aot_eager_then_compile' runs first calls plainly eagerly "
                                  "(ptc has no AOT eager): it is 'eager_then_compile'.")
            stance = "eager_then_compile"
        if skip_guard_eval_unsafe:
            _notices.not_acted_on("set_stance(skip_guard_eval_unsafe=True) has no effect: ptc "
                                  "checks every guard (see ptc.config.trust_module_state).")
        if force_backend is not None:
            _notices.not_acted_on("set_stance(force_backend=...) has no effect: each compiled "
                                  "function keeps the backend it was compiled with.")
        self.stance = stance
        self.prior = _C._get_config()["stance"]
        _C._set_config(stance=stance)

    def __enter__(self):
        _C._set_config(stance=self.stance)

    def __exit__(self, *exc):
        _C._set_config(stance=self.prior)

    def __call__(self, fn):
        import functools

        _C._set_config(stance=self.prior)  # as a decorator it applies only inside fn

        @functools.wraps(fn)
        def with_stance(*args, **kwargs):
            prior = _C._get_config()["stance"]
            _C._set_config(stance=self.stance)
            try:
                return fn(*args, **kwargs)
            finally:
                _C._set_config(stance=prior)
        return with_stance


def _generator_call(fn, args, kwargs):
    """fn(*args, **kwargs): a generator function's generator that a trace made
    but did not start, rebuilt as the call that made it, or a zip_longest given
    fillvalue= (their pickled forms, compiler/capture/trace/iter.c)."""
    return fn(*args, **kwargs)


def _drained_generator(items):
    """What a generator expression that ptc ran while tracing hands back: a
    generator over the values it yielded (they had no side effects)."""
    yield from items


def break_codes():
    """The graph-break taxonomy: a list of dicts (code, name, reason, explanation, hint)."""
    return _C._break_table()
