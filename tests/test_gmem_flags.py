"""Cross-CTA hand-overs (issue 29): GmemFlag / GmemWorkspace captured per CTA and unit, the grid
checker's verdicts on the GEMM's split-K and stream-K protocols, and their planted-bug twins, each
rejected with a counterexample naming the CTAs, units and calls (file:line)."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _gmem_programs as P  # noqa: E402

from warpsched import CrossCtaProtocol, GmemFlag, GmemWorkspace, ScheduleError, check_grid  # noqa: E402

HERE = "_gmem_programs.py"


@pytest.mark.parametrize("make, kw", [
    (P.serial_split_k, {}), (P.serial_split_k, {"splits": 3}), (P.parallel_split_k, {}),
    (P.atomic_split_k, {}), (P.stream_k, {}), (P.stream_k, {"k_tiles": 2}),
])
def test_correct_hand_overs_are_safe_up_to_the_bound(make, kw):
    r = check_grid(make(**kw))
    assert r.verdict == "SAFE", r.report()
    assert "UNPROVEN beyond" in r.statement and "grid sizes 1..4" in r.statement
    assert r.states > 0 and not r.findings


def _one(r):
    assert r.verdict == "REJECTED", r.report()
    assert len(r.findings) == 1
    f = r.findings[0]
    assert f.location is not None and f.location.file.endswith((HERE, "test_gmem_flags.py")) and f.line > 0
    assert f.expected and f.fix and f.resource
    assert f.task.startswith("CTA ")
    return f, f.format()


def test_missing_signal_is_rejected_naming_cta_unit_and_wait():
    f, text = _one(check_grid(P.serial_split_k(bug="missing_signal")))
    assert "tile_flags.wait(0, 1) in CTA 0 (unit (0, 1))" in f.message
    assert "no CTA ever signals it" in f.message and "launch: 1 CTAs, 1 units" in text
    assert f.location.text == "flag.wait(t, order)"


def test_stream_k_reader_on_the_wrong_neighbour_reads_before_its_writer():
    # 3 CTAs, 4 tiles: CTA 0's reader waits on slot 2 (CTA 2's hand-over) and reads slot 1 (CTA 1's)
    f, text = _one(check_grid(P.stream_k(bug="wrong_neighbour", grids=(3,), tiles=(4,))))
    assert "CTA 0 unit (1, 0, 1, 1) reads workspace tile 1 of sk_partials" in f.message
    assert "CTA 1 unit (1, 1, 2, 1)" in f.message and f.location.text == "ws.read(slot)"
    assert "sk_flags.wait(2, 1)" in text  # the wrong wait is in the interleaving
    # over the whole bound: found at the smallest launch (there: a wait nothing signals)
    f, _ = _one(check_grid(P.stream_k(bug="wrong_neighbour")))
    assert "sk_flags.wait(2, 1) in CTA 0" in f.message


def test_reversed_hand_over_order_is_a_cycle_across_ctas():
    f, text = _one(check_grid(P.serial_split_k(bug="reversed", grids=(2,), tiles=(3,))))
    assert f.message.startswith("a cycle of waits across CTAs: CTA 0 (unit (0, 0)")
    assert "-> CTA 1 (unit (1, 0)" in f.message
    assert "CTA 1 would signal it" in text and "CTA 0 would signal it" in text
    # at a smaller launch a CTA waits for its own later unit: also a cycle
    f, _ = _one(check_grid(P.serial_split_k(bug="reversed")))
    assert "which only its own later unit (0, 1) signals" in f.message


@pytest.mark.parametrize("make", [P.serial_split_k, P.parallel_split_k])
def test_reader_before_its_writer_is_rejected(make):
    f, text = _one(check_grid(make(bug="read_first")))
    assert "without a hand-over from its writer, CTA" in f.message
    assert "interleaving (oldest first):" in text and ".write(" in text


def test_second_plain_writer_is_rejected_unless_accumulation_is_declared():
    f, _ = _one(check_grid(P.atomic_split_k(bug="plain_write")))
    assert "has a second writer" in f.message and "accumulate()" in f.fix


def _protocol(body, **kw):
    return CrossCtaProtocol("t", lambda cta, ctas, units: range(cta, units, ctas), body, grids=(1, 2),
                            unit_counts=(2,), **kw)


def test_unordered_non_atomic_accumulations_race():
    ws = GmemWorkspace(name="acc")
    f, _ = _one(check_grid(_protocol(lambda g, u: ws.accumulate(0))))
    assert "two writes of workspace tile 0 of acc that no hand-over orders" in f.message
    assert check_grid(_protocol(lambda g, u: ws.accumulate(0, atomic=True))).verdict == "SAFE"


def test_bad_slots_are_findings_not_tracebacks():
    flag = GmemFlag(name="f", slots=2)
    r = check_grid(_protocol(lambda g, u: flag.signal(u + 5)))
    assert r.verdict == "REJECTED" and "outside the declared slots" in r.findings[0].message
    assert r.findings[0].location.file.endswith("test_gmem_flags.py")
    r = check_grid(_protocol(lambda g, u: flag.signal("a")))
    assert "not an int" in r.findings[0].message


def test_verbs_outside_a_protocol_are_refused_with_the_fix():
    flag = GmemFlag(name="f")
    with pytest.raises(ScheduleError, match="outside a CrossCtaProtocol body") as e:
        flag.wait(0)
    assert "warpsched.lower.gmem_flags.bind" in e.value.findings[0].fix


def test_waits_that_need_every_cta_resident():
    # CTA 0 waits for CTA 1: safe when both are resident, a hang when CTAs start one at a time
    flag = GmemFlag(name="f")

    def body(g, u):
        if u == 0:
            flag.wait(0, 1)
        else:
            flag.signal(0, 1)

    assert check_grid(_protocol(body, valid=lambda c, u: c == 2)).verdict == "SAFE"
    f, text = _one(check_grid(_protocol(body, valid=lambda c, u: c == 2, resident=False)))
    assert "can block forever" in f.message and "one at a time" in text


def test_a_launch_past_the_state_cap_is_unproven():
    r = check_grid(P.serial_split_k(splits=3), max_states=10)
    assert r.verdict == "UNPROVEN" and "not finished within 10 states" in r.statement and not r.findings


def test_wait_at_least_and_reset():
    # every unit counts itself; the last unit waits until all have, then reads what they wrote (unit
    # 0 as the waiter is a cycle on one CTA: it waits for its own later units); the reset orders
    # nothing, so a wait that only the reset satisfies does not make a read safe
    flag = GmemFlag(name="count")
    ws = GmemWorkspace(name="parts")

    def body(g, u):
        ws.write(u)
        flag.add(0, 1)
        if u == g.units - 1:
            flag.wait_at_least(0, g.units)
            for k in range(g.units):
                ws.read(k)

    ok = CrossCtaProtocol("count", lambda c, n, units: range(c, units, n), body, grids=(1, 2, 3), unit_counts=(1, 2, 3))
    assert check_grid(ok).verdict == "SAFE"
    first = CrossCtaProtocol("count", ok.assignment, lambda g, u: body(g, g.units - 1 - u), grids=(1,),
                             unit_counts=(2,))
    f, _ = _one(check_grid(first))
    assert "which only its own later unit 1 signals" in f.message

    def relaxed(g, u):
        if u == 1:
            ws.write(1)
            flag.signal(0, 1)
            flag.reset(0)
        else:
            flag.wait(0, 0)
            ws.read(1)

    f, _ = _one(check_grid(_protocol(relaxed)))
    assert "before its writer" in f.message or "without a hand-over" in f.message
