"""ptc.config: capture settings.

recompile_limit  entries per code position before it runs eagerly (default 8)
strict           internal errors raise instead of falling back (PTC_STRICT=1)
inline_depth     the deepest call stack ptc inlines (default 48)
repro_dir        where fallback repros go (PTC_REPRO; default a temp dir)
logs             PTC_LOGS components, e.g. "graph_breaks,+guards,recompiles"
trace_dir        PTC_TRACE_DIR: captured.ptir, guards.txt, breaks.json per compile
inject_failure   for testing the fallback paths: "compile" makes every compile
                 fail with an internal error, "backend" makes compiling
                 backends fail; "" (default) is off
compiled_autograd  graphs that need gradients compile their forward and
                 backward (default True; False or PTC_COMPILED_AUTOGRAD=0:
                 they run through torch ops under autograd, as the report
                 says)
trust_module_state  cache hits skip the guards on module attributes,
                 parameters, buffers, submodules and hooks while no
                 nn.Module method changed a module, without comparing the
                 versions of the modules' dicts as they do by default
                 (default False; writes around nn.Module, e.g. to
                 m.__dict__, are then not seen)
"""
import os

from . import _C

_C_SETTINGS = ("recompile_limit", "strict", "inline_depth", "repro_dir", "inject_failure",
               "trust_module_state", "compiled_autograd")


class _Config:
    def __getattr__(self, name):
        if name in _C_SETTINGS:
            return _C._get_config()[name]
        if name == "logs":
            return os.environ.get("PTC_LOGS", "")
        if name == "trace_dir":
            return os.environ.get("PTC_TRACE_DIR", "")
        raise AttributeError("ptc.config has no setting %r" % name)

    def __setattr__(self, name, value):
        if name == "trust_module_state" and value:
            from . import _module_state

            _module_state.install()
        if name in _C_SETTINGS:
            _C._set_config(**{name: value})
        elif name == "logs":
            _C._set_logs(value or "")
            os.environ["PTC_LOGS"] = value or ""
        elif name == "trace_dir":
            if value:
                os.environ["PTC_TRACE_DIR"] = str(value)
            else:
                os.environ.pop("PTC_TRACE_DIR", None)
        else:
            raise AttributeError("ptc.config has no setting %r" % name)

    def apply_options(self, options):
        for key, value in dict(options).items():
            setattr(self, key.replace(".", "_"), value)

    def __dir__(self):
        return list(_C_SETTINGS) + ["logs", "trace_dir"]

    def __repr__(self):
        return "ptc.config(%s)" % ", ".join("%s=%r" % (k, getattr(self, k)) for k in self.__dir__())


config = _Config()
