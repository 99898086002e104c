"""ptexplain's measurements in the capture front end (ptc._C._measure).

With measuring on, every compile event carries a stats record: graph runs,
time inside the graph, and for a segment that ends in a break the time from
the end of its graph to the start of the next one (the break running for
real), compiles excluded; tensors that cross a break are named by output and
input index. Recompile events say which guard failed, its old and new value
and the line that made the guard. Eager fallbacks are timed per frame.
"""
import time

import pytest

torch = pytest.importorskip("torch")

import ptc  # noqa: E402

_C = ptc._C


@pytest.fixture(autouse=True)
def measuring():
    _C._measure(True)
    yield
    _C._measure(False)


def events_of(cf_serial=None):
    evs = [dict(e) for e in _C._measured()["events"]]
    return [e for e in evs if cf_serial is None or e["cf"] == cf_serial]


def stats(ev):
    return _C._entry_stats(ev["stats"])


def sleepy(x):
    y = x * 2
    time.sleep(0.02)  # a C function: the graph breaks here (PTC-B006)
    return y + 1


def test_break_cost_is_the_time_outside_graphs():
    f = ptc.compile(sleepy, backend="eager")
    x = torch.randn(3, 4)
    before = len(_C._measured()["events"])
    for _ in range(3):
        assert torch.equal(f(x), x * 2 + 1)
    evs = [dict(e) for e in _C._measured()["events"][before:]]
    compiles = [e for e in evs if e["kind"] == "compile"]
    assert [e["end"] for e in compiles] == ["break", "return"]
    first, second = stats(compiles[0]), stats(compiles[1])
    assert first["runs"] == 3 and first["breaks"] == 3 and len(first["samples"]) == 3
    # each run sleeps 20 ms outside the graphs; the graphs themselves are tiny
    assert all(s >= 19.0 for s in first["samples"]), first["samples"]
    assert 57.0 <= first["break_ms"] < 3 * 20.0 + 200, first
    assert first["graph_ms"] < first["break_ms"]
    # y = x * 2 leaves the first graph and is read by the second
    assert first["cross"] == [[compiles[1]["id"], 0, 0]]
    assert second["runs"] == 3 and second["breaks"] == 0 and second["samples"] == []
    assert {e["cf"] for e in evs} == {evs[0]["cf"]}
    m = _C._measured()
    assert m["call_ms"] >= first["break_ms"] and m["calls"] >= 3


def test_recompile_names_the_guard_old_new_and_line():
    def g(x):
        return x.sum(0) * 2  # line that reads x first

    f = ptc.compile(g, backend="eager")
    before = len(_C._measured()["events"])
    f(torch.randn(2, 3))
    f(torch.randn(5, 3))
    evs = [dict(e) for e in _C._measured()["events"][before:]]
    rec = [e for e in evs if e["kind"] == "recompile"]
    assert len(rec) == 1, evs
    r = rec[0]
    assert r["guard_kind"] == "tensor" and r["source"] == "L['x']"
    assert r["old"].startswith("f32[2,3]") and r["new"].startswith("f32[5,3]"), r
    assert r["file"] == __file__ and "return x.sum(0) * 2" in r["text"]
    assert r["text"][r["col"] - 1:r["endcol"] - 1] == "x", r


def test_limit_and_eager_time():
    old = ptc.config.recompile_limit
    ptc.config.recompile_limit = 2
    try:
        def h(x):
            return x + 1

        f = ptc.compile(h, backend="eager", dynamic=False)  # every new size recompiles
        before = len(_C._measured()["events"])
        with pytest.warns(UserWarning, match="recompile limit"):
            for n in range(1, 6):
                f(torch.randn(n))
        evs = [dict(e) for e in _C._measured()["events"][before:]]
        lim = [e for e in evs if e["kind"] == "recompile_limit"]
        assert len(lim) == 1 and lim[0]["old"].startswith("f32[2]") and lim[0]["new"].startswith("f32[3]")
        calls, ms, steady = _C._measured()["eager"]["test_limit_and_eager_time.<locals>.h"]
        assert calls == 3 and ms >= steady * 2 >= 0
    finally:
        ptc.config.recompile_limit = old


def test_off_means_no_stats():
    _C._measure(False)
    f = ptc.compile(lambda x: x * 3, backend="eager")
    f(torch.randn(2))
    ev = dict(f._events()[0])
    assert "stats" not in ev and "cf" not in ev


def chain_with_a_break(ops):
    def f(x):
        for _ in range(ops):
            x = x * 1.0001 + 0.5
        time.sleep(0)  # a C function: the graph breaks here (PTC-B006)
        for _ in range(ops):
            x = x.tanh() - 0.25
        return x
    return f


@pytest.mark.parametrize("backend", ["eager", "ptc"])
def test_measuring_costs_per_graph_and_break_not_per_op(backend):
    """ptexplain's own cost (issue 12 item 11): measuring reads the clock a
    few times per graph and per break, never per op, so a call of 2 graphs
    and 1 break reads it as often with 2 ops per graph as with 300."""
    x = torch.randn(8)
    reads = []
    for ops in (2, 300):
        f = ptc.compile(chain_with_a_break(ops), backend=backend)
        for _ in range(2):
            f(x)  # compiles, then a warm call
        before = _C._measured()["clock_reads"]
        for _ in range(5):
            f(x)
        reads.append(_C._measured()["clock_reads"] - before)
    assert reads[0] == reads[1] and 0 < reads[0] <= 5 * 6, reads
