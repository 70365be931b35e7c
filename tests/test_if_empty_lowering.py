"""``d.if_empty()`` lowered: a kernel whose loop count is a runtime value (the rows of its input) traced and
compiled for sm_90a on the CPU, with and without a block after the loop that runs when the loop ran no iteration.
The block compiles to one more global store, behind a branch on the loop's bounds; the checker proves the program
inside the trace for every count >= 0."""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402  (pins the arch before cutlass compiles anything)

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402

from warpsched import MemoryResource, StageInfo, Task, TaskManager, domain_loop, producer_work, schedule  # noqa: E402
from warpsched import trip_count  # noqa: E402

THREADS = 128


@dataclass(kw_only=True)
class Rows(MemoryResource):
    src: Any = None
    dst: Any = None
    flag: Any = None

    @producer_work
    @cute.jit
    def add_row(self, stage_info: StageInfo):
        tx, _, _ = cute.arch.thread_idx()
        if tx < cute.size(self.src, mode=[1]):
            self.dst[stage_info.loop_offset, tx] = self.dst[stage_info.loop_offset, tx] + \
                self.src[stage_info.loop_offset, tx]

    @producer_work
    @cute.jit
    def mark_empty(self, stage_info: StageInfo):
        tx, _, _ = cute.arch.thread_idx()
        if tx < cute.size(self.flag):
            self.flag[tx] = 1.0


@schedule
def rows_with_if_empty(res, rows):
    with domain_loop(0, rows, 1) as d:
        res.add_row()
    with d.if_empty():
        res.mark_empty()


@schedule
def rows_plain(res, rows):
    with domain_loop(0, rows, 1):
        res.add_row()


def build(sched, src=None, dst=None, flag=None, rows=None):
    res = Rows(name="Rows", src=src, dst=dst, flag=flag)
    task = Task(name="RowTask", src_resources=[], dst_resources=[res], warp_idx=0, num_warps=THREADS // 32,
                schedule=sched(res, trip_count("rows", rows, min=0)))
    return TaskManager(tasks=[task], resource_dependency_graph={res: []}, verbose=False)


def _compile(sched):
    @cute.kernel
    def kernel(mx: cute.Tensor, my: cute.Tensor, mf: cute.Tensor):
        mgr = build(sched, mx, my, mf, rows=cute.size(mx, mode=[0]))
        mgr.setup_resources_and_tasks()
        mgr.run()

    @cute.jit
    def host(mx: cute.Tensor, my: cute.Tensor, mf: cute.Tensor, stream):
        kernel(mx, my, mf).launch(grid=[1, 1, 1], block=[THREADS, 1, 1], stream=stream)

    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    M, N = cute.sym_int32(), cute.sym_int32()
    x = make_fake_tensor(cutlass.Float32, (M, N), (cute.sym_int64(), 1), assumed_align=16)
    y = make_fake_tensor(cutlass.Float32, (M, N), (cute.sym_int64(), 1), assumed_align=16)
    f = make_fake_tensor(cutlass.Float32, (cute.sym_int32(),), (1,), assumed_align=4)
    return cute.compile(host, x, y, f, make_fake_stream(), options=_common.ptx_options("sm_90a")).artifacts.PTX


def test_the_block_after_the_loop_compiles_to_one_guarded_store():
    plain, guarded = _compile(rows_plain), _compile(rows_with_if_empty)
    stores = lambda ptx: len(re.findall(r"\bst\.global", ptx))  # noqa: E731
    assert stores(guarded) == stores(plain) + 1
    # the added store is behind two tests, the work body's own (thread < flag's size) and the block's guard (the
    # loop's bounds: rows <= 0); a guard lowered to a constant, or to a test the loop's exit passes, leaves one
    tests = lambda ptx: len(re.findall(r"\bsetp\.", ptx))  # noqa: E731
    assert tests(guarded) == tests(plain) + 2
    tail = guarded[guarded.rindex("st.global") - 400:guarded.rindex("st.global")]
    assert re.search(r"setp\.(gt|ge)\.s32", tail), tail


def test_the_program_is_proven_for_every_row_count():
    m = build(rows_with_if_empty)
    assert m.result.errors == []
