"""bench/_graphs.py (the GEMM benchmarks' timing and tables) on the CPU: balanced rounds,
medians, the printed ratios and geomeans, and graph_ms with a stand-in torch and do_bench."""
import contextlib
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
import _graphs  # noqa: E402


def test_time_rounds_balances_the_order_and_returns_medians(capsys):
    order = []
    fake = {"torch": [1.0, 3.0, 2.0], "a": [0.5, 0.4, 9.0]}  # ms per round

    def time_one(side):
        order.append(side)
        return fake[side][sum(1 for s in order if s == side) - 1]

    med = _graphs.time_rounds((64, 32, 16), {"torch": "torch", "a": "a"}, 3, time_one)
    assert order == ["torch", "a", "a", "torch", "a", "torch"]  # _eager.round_order: reversed, then rotated
    assert med == {"torch": 2.0, "a": 0.5}
    line = capsys.readouterr().out
    assert line.startswith("64x32x16: torch 2000.0 us") and "x4.000" in line and "rounds torch 1000/3000/2000" in line


def test_ratio_table_and_geomeans(capsys):
    results = {(8, 8, 8): {"torch": 2.0, "a": 1.0, "b": 4.0}, (16, 16, 16): {"torch": 2.0, "a": 4.0, "b": 1.0}}
    geo = _graphs.print_ratio_table(results, ["a", "b"], vs_ref=True)
    out = capsys.readouterr().out
    assert "| 8x8x8 | 0 | 2.000 | 0.500 | 0.250 |" in out  # torch / side, then b against a
    assert math.isclose(geo["a"], 1.0) and math.isclose(geo["b"], 1.0)
    assert "geomean vs torch: a 1.000, b 1.000" in out and "geomean vs a: a 1.000, b 1.000" in out


def test_graph_ms_divides_by_the_launches_in_the_graph():
    calls = []

    class Graph:
        def replay(self):
            pass

    class Cuda:
        Stream = object
        CUDAGraph = Graph

        def current_stream(self):
            return type("S", (), {"wait_stream": lambda self, other: None})()

        def synchronize(self):
            pass

        def stream(self, s):
            return contextlib.nullcontext()

        def graph(self, g):
            return contextlib.nullcontext()

    class Torch:
        cuda = Cuda()

    Torch.cuda.Stream = lambda: type("S", (), {"wait_stream": lambda self, other: None})()

    def do_bench(fn, warmup, rep, return_mode):
        assert (warmup, rep, return_mode) == (10, 40, "median")
        return 3.0  # ms per replay

    ms = _graphs.graph_ms(Torch, do_bench, lambda: calls.append(1), est_ms=0.01, rep_ms=40)
    assert len(calls) == 1 + 100  # a warm-up call, then 100 launches captured (about 1 ms of work)
    assert math.isclose(ms, 0.03)


def test_launch_poisoned_poisons_before_the_launch_that_counts():
    events = []

    class C:
        def fill_(self, v):
            events.append(("fill", math.isnan(v)))

    class Graph:
        def replay(self):
            events.append("replay")

    class Cuda:
        CUDAGraph = Graph

        def graph(self, g):
            events.append("capture")
            return contextlib.nullcontext()

        def synchronize(self):
            events.append("sync")

    class Torch:
        cuda = Cuda()

    _graphs.launch_poisoned(Torch, lambda: events.append("launch"), C(), graph=False)
    assert events == [("fill", True), "launch", "sync"]
    events.clear()
    _graphs.launch_poisoned(Torch, lambda: events.append("launch"), C(), graph=True)
    # a warm-up launch, the captured launch, then NaN, then the replay that is checked
    assert events == ["launch", "capture", "launch", ("fill", True), "replay", "sync"]


def test_rel_error_is_nan_for_a_poisoned_output():
    import numpy as np

    class T:
        def __init__(self, a):
            self.a = np.asarray(a, dtype=np.float64)

        def all(self):
            return bool(self.a.all())

        def double(self):
            return self

        def __sub__(self, other):
            return T(self.a - other.a)

        def norm(self):
            return float(np.linalg.norm(self.a))

    class Torch:
        isfinite = staticmethod(lambda t: T(np.isfinite(t.a)))

    ref = T([3.0, 4.0])
    assert math.isclose(_graphs.rel_error(Torch, T([3.0, 4.5]), ref), 0.1)
    assert math.isnan(_graphs.rel_error(Torch, T([3.0, float("nan")]), ref))
    assert not _graphs.rel_error(Torch, T([float("inf"), 4.0]), ref) < 1e-2  # what the callers test


def test_run_child_exits_with_the_childs_status_or_124(capsys):
    import pytest

    with pytest.raises(SystemExit) as done:
        _graphs.run_child([sys.executable, "-c", "raise SystemExit(3)"], limit=60)
    assert done.value.code == 3 and "child exit 3" in capsys.readouterr().out
    with pytest.raises(SystemExit) as done:
        _graphs.run_child([sys.executable, "-c", "import time; time.sleep(30)"], limit=1)
    assert done.value.code == 124 and "ran past 1 s" in capsys.readouterr().out


def test_eager_rounds_balance_every_sides_position(monkeypatch):
    """bench/_eager.round_order: after any even number of rounds every side's mean position is the same (the
    order reversed every other round, rotated every two), so a clock that sags over a round of heavy sides
    hits them alike; WS_FIXED_ORDER=1 keeps the old fixed order."""
    import _eager

    sides = ["ws call", "ws default", "ws a", "cuDNN", "FA4"]
    for rounds in (2, 4, 6):
        pos = {s: sum(_eager.round_order(sides, r).index(s) for r in range(rounds)) / rounds for s in sides}
        assert set(pos.values()) == {(len(sides) - 1) / 2}, pos
    assert sorted(_eager.round_order(sides, 3)) == sorted(sides)
    monkeypatch.setenv("WS_FIXED_ORDER", "1")
    assert all(_eager.round_order(sides, r) == sides for r in range(4))


def test_the_williams_order_balances_positions_and_predecessors(monkeypatch):
    """bench/_eager.williams_rows: every side at every position and right after every other side equally often
    (the balanced order's rotation keeps each side's neighbours, so a side always follows the same ones);
    ``design_rounds`` runs whole designs under WS_ORDER=williams."""
    import collections

    import _eager

    for n in range(2, 9):
        rows = _eager.williams_rows(n)
        assert len(rows) == (n if n % 2 == 0 else 2 * n) and all(sorted(r) == list(range(n)) for r in rows)
        after = collections.Counter((a, b) for r in rows for a, b in zip(r, r[1:]))
        assert len(after) == n * (n - 1) and len(set(after.values())) == 1
        at = collections.Counter((x, i) for r in rows for i, x in enumerate(r))
        assert len(at) == n * n and len(set(at.values())) == 1
    sides = ["call", "default", "again", "p8", "cuDNN", "flash", "FA4"]
    assert _eager.design_rounds(len(sides), 2) == 2  # the balanced order keeps the rounds asked for
    monkeypatch.setenv("WS_ORDER", "williams")
    assert _eager.design_rounds(len(sides), 2) == 14 and _eager.design_rounds(4, 5) == 8
    orders = [_eager.round_order(sides, r) for r in range(14)]
    assert all(sorted(o) == sorted(sides) for o in orders) and orders[0] != orders[1]
    before = {s: collections.Counter(o[o.index(s) - 1] for o in orders if o.index(s)) for s in sides}
    assert all(set(c) == set(sides) - {s} and len(set(c.values())) == 1 for s, c in before.items())


def test_both_attention_scripts_resolve_a_variant_the_same_way():
    """bench/attention_correctness.py's ``resolve_variant`` (also attention_sweep.py's): ``tuned=1`` / ``default=1``
    start from the default's options, ``hd=`` / ``causal_only`` / ``full_only`` restrict where a variant runs. The
    correctness script used to pass ``tuned`` on to the kernel, which refused it, so a sweep's variant string
    could not be checked there first."""
    import types

    import attention_correctness as ac

    calls = []

    def tuned_options(d, causal, sq=None, sk=None):
        calls.append((d, causal, sq, sk))
        return {"base": d, "long": sq}
    att = types.SimpleNamespace(tuned_options=tuned_options)
    variants = ac.parse_variants("p4:tuned=1;poly_exp2=4,again:default=1,c:causal_only=1;x=2,h:hd=128;y=1")
    assert variants["p4"] == {"tuned": 1, "poly_exp2": 4}
    assert ac.resolve_variant(att, variants["p4"], 64, False, 4096, 4096) == {"base": 64, "long": None,
                                                                             "poly_exp2": 4}
    assert ac.resolve_variant(att, variants["again"], 64, True, 4096, 1000) == {"base": 64, "long": 4096}
    assert calls[-1] == (64, True, 4096, 1000)
    assert ac.resolve_variant(att, variants["c"], 64, False, 1, 1) is None
    assert ac.resolve_variant(att, variants["c"], 64, True, 1, 1) == {"x": 2}
    assert ac.resolve_variant(att, variants["h"], 64, True, 1, 1) is None
    assert ac.resolve_variant(att, variants["h"], 128, True, 1, 1) == {"y": 1}
    assert variants["p4"] == {"tuned": 1, "poly_exp2": 4}  # the parsed variant is left as it was


def test_alternate_records_each_round_and_pairs_ratios_by_round():
    """bench/_eager.alternate(samples=...) keeps every side's time per round; paired_ratio divides within a
    round, so a clock that slows both sides alike in one round leaves the ratio alone."""
    import _eager

    class FakeTorch:
        class cuda:
            @staticmethod
            def synchronize():
                pass

    samples = {}
    med = _eager.alternate(FakeTorch, {"a": lambda: None, "b": lambda: None}, rounds=4, iters=2, samples=samples)
    assert set(samples) == {"a", "b"} and all(len(v) == 4 for v in samples.values()) and set(med) == {"a", "b"}
    slow_round = {"base": [1.0, 2.0, 1.0], "side": [0.5, 1.0, 0.8]}  # round 2 twice as slow for both
    mid, lo, hi = _eager.paired_ratio(slow_round, "side", "base")
    assert (mid, lo, hi) == (2.0, 1.25, 2.0)


def test_the_attention_sweep_reads_gqa_shapes():
    """bench/attention_sweep.py's ``--shapes``: ``BxHxS`` as before, and ``BxH/HkxS`` for H query heads over Hk
    K / V heads (the decoder block's GQA 32 / 8)."""
    import pytest

    import attention_sweep as sweep

    assert sweep.parse_shape("16x16x1024") == (16, 16, 16, 1024)
    assert sweep.parse_shape("4x32/8x2048") == (4, 32, 8, 2048)
    with pytest.raises(ValueError):
        sweep.parse_shape("4x32x8x2048")


def test_a_rows_spread_pairs_each_peer_with_warpsched_by_round():
    """bench/_eager.spread_line (what model_block.py prints under its table): each peer's time over warpsched's,
    paired by round, as the median and the range; a round where the clock sagged for both sides moves neither."""
    import _eager

    samples = {"warpsched": [10.0, 20.0, 10.0], "torch": [11.0, 20.0, 9.0], "quack+FA4": [12.0, 24.0, 12.0]}
    line = _eager.spread_line("prefill 4x2048 forward compile", samples)
    assert line.startswith("  prefill 4x2048 forward compile, by round: ")
    assert "torch / warpsched 1.000x (0.900-1.100)" in line  # paired: 1.1, 1.0, 0.9
    assert "quack+FA4 / warpsched 1.200x (1.200-1.200)" in line  # the doubled round pairs at 1.2 too
    assert "warpsched / warpsched" not in line
