"""Every change to a module's state that torch.compile notices recompiles
under ptc too, with the guard that failed as the reason, however the cache
hit reads module attributes (dict reads at remembered positions): attribute
writes, deletions that move the instance dict's entries, train/eval,
replaced parameters and buffers, replaced submodules, forward hooks added
and removed, methods swapped on a (base) class or shadowed by an instance
attribute, global module hooks, grad mode, input dtype and shape. Each
runs twice: with full guards (a hit takes module-held values after comparing
the versions of the dicts they came from), and with
ptc.config.trust_module_state (hits skip module guards while no nn.Module
method changed a module); writes around nn.Module are noticed only with full
guards.
"""
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import ptc  # noqa: E402


def recompiles(compiled):
    handle = getattr(compiled, "_ptc_compiled", compiled)
    return [e["guard"] for e in handle._events() if e["kind"] == "recompile"]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.act = nn.Sequential(nn.ReLU(), nn.Identity())
        self.scale = 2.0

    def forward(self, x):
        return self.act(self.bn(self.conv(x))) * self.scale


def hit_twice(c, m, x):
    """Two calls agreeing with eager: the second is a cache hit."""
    for _ in range(2):
        assert torch.allclose(c(x), m(x), atol=1e-5)


@pytest.fixture(params=[False, True], ids=["guards", "trusted"])
def trusted(request):
    ptc.config.trust_module_state = request.param
    yield request.param
    ptc.config.trust_module_state = False


@pytest.fixture
def compiled(trusted):
    torch.manual_seed(0)
    m = Block().eval()
    c = ptc.compile(m, backend="eager")
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        hit_twice(c, m, x)
        yield m, c, x


def test_conv_stride_write(compiled):
    m, c, x = compiled
    m.conv.stride = (2, 2)
    hit_twice(c, m, x)
    (guard,) = recompiles(c)
    assert "conv.stride == (1, 1)" in guard and "now (2, 2)" in guard, guard


def test_bn_eps_write(compiled):
    m, c, x = compiled
    m.bn.eps = 1e-2
    hit_twice(c, m, x)
    (guard,) = recompiles(c)
    assert "bn.eps" in guard and "now 0.01" in guard, guard


def test_attribute_deleted_and_written_again(compiled):
    """The entry moves to the end of the instance dict: still read right."""
    m, c, x = compiled
    del m.scale
    m.scale = 3.0
    hit_twice(c, m, x)
    (guard,) = recompiles(c)
    assert "scale" in guard and "now 3.0" in guard, guard
    del m.scale
    m.scale = 2.0
    hit_twice(c, m, x)  # the first entry again
    assert len(recompiles(c)) == 1


def test_instance_dict_grows_and_resizes(compiled):
    m, c, x = compiled
    for i in range(64):  # new attributes nobody reads: no recompile
        setattr(m.conv, "extra%d" % i, i)
    hit_twice(c, m, x)
    assert recompiles(c) == []
    m.conv.padding = (0, 0)
    hit_twice(c, m, x)
    (guard,) = recompiles(c)
    assert "conv.padding" in guard, guard


def test_attribute_written_straight_into_the_dict(compiled, trusted):
    m, c, x = compiled
    if trusted:
        pytest.skip("documented: writes around nn.Module are not seen when trusted")
    m.conv.__dict__["dilation"] = (2, 2)
    hit_twice(c, m, x)
    (guard,) = recompiles(c)
    assert "conv.dilation" in guard and "now (2, 2)" in guard, guard


@pytest.mark.parametrize("how", ["object.__setattr__", "instance dict replaced", "hook dict",
                                 "_modules dict", "submodule's dict"])
def test_writes_around_nn_module(compiled, trusted, how):
    """Without the setting, a hit checks the versions of the dicts its kept
    module values came from: a write no nn.Module method saw still recompiles."""
    m, c, x = compiled
    if trusted:
        pytest.skip("documented: writes around nn.Module are not seen when trusted")
    seen = []
    if how == "object.__setattr__":
        object.__setattr__(m.bn, "eps", 0.5)
        expect = "bn.eps"
    elif how == "instance dict replaced":
        d = dict(m.conv.__dict__)
        d["stride"] = (2, 2)
        object.__setattr__(m.conv, "__dict__", d)
        expect = "conv.stride"
    elif how == "hook dict":
        m.bn._forward_hooks[12345] = lambda mod, args, out: seen.append(1)
        expect = "bn has no hooks"
    elif how == "_modules dict":
        m.act._modules["1"] = nn.Tanh()
        expect = "act._modules['1'] is Identity()"
    else:
        m.act._modules["0"].__dict__["inplace"] = True
        expect = "inplace"
    hit_twice(c, m, x)
    guards = recompiles(c)
    assert guards and expect in guards[0], guards
    assert seen == ([1] * 4 if how == "hook dict" else [])


def test_train_eval(compiled):
    m, c, x = compiled
    m.train()
    torch.manual_seed(0)
    out = c(x)
    torch.manual_seed(0)
    assert torch.allclose(out, Block.forward(m, x), atol=1e-5)
    guards = recompiles(c)
    assert len(guards) == 1 and ".training" in guards[0] and "now True" in guards[0], guards


def test_parameter_replaced(compiled):
    m, c, x = compiled
    m.conv.weight = nn.Parameter(torch.randn(4, 3, 3, 3, dtype=torch.float64))
    m.conv.bias = None
    with pytest.raises(RuntimeError):
        m(x)  # f64 weight, f32 input: eager refuses, and so does the recompiled call
    with pytest.raises(RuntimeError):
        c(x)
    (guard,) = recompiles(c)
    assert "conv.weight" in guard and "f64" in guard, guard


def test_parameter_written_into_parameters_dict(compiled, trusted):
    m, c, x = compiled
    if trusted:
        pytest.skip("documented: writes around nn.Module are not seen when trusted")
    m.conv._parameters["bias"] = None
    hit_twice(c, m, x)
    (guard,) = recompiles(c)
    assert "conv.bias" in guard, guard


def test_buffer_replaced(compiled):
    m, c, x = compiled
    m.bn.running_var = torch.ones(4, 1)
    with pytest.raises(RuntimeError):
        c(x)
    (guard,) = recompiles(c)
    assert "bn.running_var" in guard, guard


def test_submodule_replaced(compiled):
    m, c, x = compiled
    m.act[1] = nn.Tanh()
    hit_twice(c, m, x)
    (guard,) = recompiles(c)
    assert "act._modules['1'] is Identity()" in guard and "Tanh" in guard, guard


def test_forward_hook_added_and_removed(compiled):
    m, c, x = compiled
    seen = []
    h = m.bn.register_forward_hook(lambda mod, args, out: seen.append(1))
    hit_twice(c, m, x)
    assert len(seen) == 4  # twice through c, twice through m
    guards = recompiles(c)
    assert guards and "bn has no hooks" in guards[0], guards
    h.remove()
    hit_twice(c, m, x)
    assert len(seen) == 4  # the entry without hooks again


def test_forward_pre_hook_on_the_compiled_module(compiled):
    m, c, x = compiled
    h = m.conv.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    hit_twice(c, m, x)
    h.remove()
    (guard,) = recompiles(c)
    assert "conv has no hooks" in guard, guard


def test_method_swapped_on_a_base_class(compiled):
    """BatchNorm2d finds forward on _BatchNorm: a swap there is a swap for it
    too (a hit remembers the class's version, which a base's change moves)."""
    m, c, x = compiled
    base = nn.modules.batchnorm._BatchNorm
    saved = base.forward

    def doubled(self, inp):
        return saved(self, inp) * 2

    base.forward = doubled
    try:
        hit_twice(c, m, x)
        (guard,) = recompiles(c)
        assert "bn.forward is the method <function _BatchNorm.forward" in guard, guard
        assert "doubled" in guard, guard
    finally:
        base.forward = saved
    hit_twice(c, m, x)  # the first entry again
    assert len(recompiles(c)) == 1


def test_method_shadowed_by_an_instance_attribute(compiled):
    m, c, x = compiled
    m.conv.forward = lambda inp: nn.Conv2d.forward(m.conv, inp) + 1
    hit_twice(c, m, x)
    (guard,) = recompiles(c)
    assert "conv.forward is the method" in guard and "shadowed" in guard, guard
    del m.conv.forward
    hit_twice(c, m, x)
    assert len(recompiles(c)) == 1


class Helper(nn.Module):
    def scale(self, x):
        return x * 2


class UsesHelper(nn.Module):
    """Calls a method of a submodule directly: a method guard on a module
    that no attribute read or hooks guard otherwise touches."""

    def __init__(self):
        super().__init__()
        self.h = Helper()

    def forward(self, x):
        return self.h.scale(x) + 1


def test_method_of_an_uncalled_submodule_shadowed(trusted):
    m = UsesHelper()
    c = ptc.compile(m, backend="eager")
    x = torch.randn(3)
    hit_twice(c, m, x)
    m.h.scale = lambda inp: inp * 3
    hit_twice(c, m, x)
    (guard,) = recompiles(c)
    assert "h.scale is the method" in guard and "shadowed" in guard, guard


def test_global_forward_hook(compiled):
    """Global hooks change the call path (through Module.__call__)."""
    m, c, x = compiled
    if not hasattr(nn.modules.module, "register_module_forward_hook"):
        pytest.skip("torch without global module hooks")
    calls = []
    h = nn.modules.module.register_module_forward_hook(lambda mod, args, out: calls.append(type(mod)))
    try:
        for _ in range(2):
            del calls[:]
            c(x)
            assert nn.BatchNorm2d in calls and nn.Conv2d in calls, calls
    finally:
        h.remove()
    del calls[:]
    hit_twice(c, m, x)
    assert calls == []


def test_grad_mode(compiled):
    m, c, x = compiled
    with torch.enable_grad():
        out = c(x)
    assert out.requires_grad
    assert recompiles(c) == ["torch.is_grad_enabled() == False (now True)"]


def test_input_dtype_and_shape(compiled):
    m, c, x = compiled
    hit_twice(c, m, torch.randn(1, 3, 8, 8))
    m.double()
    hit_twice(c, m, x.double())
    guards = recompiles(c)
    assert len(guards) == 2 and "L['x']" in guards[0] and "f64" in guards[1], guards


def test_trusted_hits_take_kept_values_until_a_module_changes():
    """The trusted fast path is taken (no guard of the module runs), and
    still notices a change made through nn.Module."""
    ptc.config.trust_module_state = True
    try:
        m = Block().eval()
        c = ptc.compile(m, backend="eager")
        x = torch.randn(2, 3, 8, 8)
        with torch.no_grad():
            hit_twice(c, m, x)
            m.conv.__dict__["stride"] = (2, 2)  # around nn.Module: the kept value stays
            assert c(x).shape == (2, 4, 8, 8)
            m.bn.momentum = 0.5  # through nn.Module: a full check, which sees both
            assert c(x).shape == (2, 4, 4, 4)
        (guard,) = recompiles(c)
        assert "conv.stride == (1, 1)" in guard, guard
    finally:
        ptc.config.trust_module_state = False


def test_trusted_module_list_edits_and_setting_off():
    ptc.config.trust_module_state = True
    try:
        class Stack(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x)
                return x

        m = Stack()
        c = ptc.compile(m, backend="eager")
        x = torch.randn(2, 4)
        with torch.no_grad():
            hit_twice(c, m, x)
            m.layers.insert(0, nn.Linear(4, 4))  # writes _modules directly, inside a wrapped method
            hit_twice(c, m, x)
            m.layers[0].weight.requires_grad_(False)
        guards = recompiles(c)
        assert len(guards) == 1 and "layers" in guards[0], guards
    finally:
        ptc.config.trust_module_state = False
    assert ptc.config.trust_module_state is False


def test_trusted_forward_that_writes_its_module():
    """The epoch moves on every call: full checks, still exact."""
    class Noting(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            self.seen = tuple(x.shape)  # replayed after the graph, through __setattr__
            return self.lin(x)

    ptc.config.trust_module_state = True
    try:
        m = Noting()
        c = ptc.compile(m, backend="eager")
        x = torch.randn(2, 4)
        with torch.no_grad():
            for _ in range(20):
                assert torch.allclose(c(x), m(x))
            del m.seen
            c(x)
            assert m.seen == (2, 4)
            m.lin.weight = nn.Parameter(torch.randn(4, 4))
            assert torch.allclose(c(x), m(x))  # the new weight, not a kept one
        assert recompiles(c) == []  # same shape and dtype: the entry fits
    finally:
        ptc.config.trust_module_state = False
