"""examples/hopper/shared_stage.py: two consumer tasks rewriting their own halves of one stage in place. The
program is SAFE with disjoint footprints and compiles for sm_90a, each half's sync on its task's own named
barrier; the twin whose second task is passed the first one's half is SAFE to the checker (the footprints are
declared by task) and refused while the kernel is traced, at the call that passes it; the twin whose
footprints overlap is rejected by the checker. On the H200: ``run`` (y = 2 x)."""
from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

from _planting import QUIET, planted, planted_line  # noqa: E402
from warpsched import ValidationError, schedule, domain_loop  # noqa: E402

import shared_stage as ex  # noqa: E402


@schedule
def _both_take_half_0(ring, n, half):
    with domain_loop(0, n, 1):
        ring.wait()
        ring.double(half=0)  # planted: Half1 doubles Half0's half
        ring.store(half=half)
        ring.release()


class _Overlapping(ex.Ring):
    def consumer_footprint(self, task_name):
        return {"H0": "rw", "H1": "rw"}  # planted: each task claims the whole stage


def test_the_example_is_safe():
    assert ex.build(**QUIET).result.checker.verdict == "SAFE"


def test_the_example_compiles_with_task_owned_barriers():
    pytest.importorskip("cutlass")
    from _barriers import foreign_barriers, named_barriers

    ptx = ex.compile_for_cpu().artifacts.PTX
    tasks = ex.build(**QUIET).program.tasks
    assert named_barriers(ptx) == [(13, 32), (14, 32)] and not foreign_barriers(ptx, tasks)


def test_a_half_passed_wrong_is_refused_where_it_is_passed():
    pytest.importorskip("cutlass")
    with planted(ex, half_schedule=_both_take_half_0):
        assert ex.build(**QUIET).result.checker.verdict == "SAFE"  # the footprints say Half1 writes H1
        with pytest.raises(ValidationError) as e:
            ex.compile_for_cpu()
    msg = str(e.value)
    assert "Ring.double() in task 'Half1' writes part 'H0'" in msg, msg
    assert planted_line(__file__, "# planted: Half1") in msg, msg


def test_overlapping_footprints_are_rejected_by_the_checker():
    with planted(ex, Ring=_Overlapping):
        with pytest.raises(ValidationError) as e:
            ex.build(**QUIET)
    assert "[consumer writes]" in str(e.value) and "part 'H0'" in str(e.value)
