"""State a work keeps in its resource's attributes, across the lowering's runtime loops and ifs
(``lower.region_state``): DSL scalars are carried, other DSL values rebound inside a region are put back,
and a Python scalar a loop body changes is refused with the attribute, the resource and the fix."""
from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("cutlass")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))

import _common  # noqa: E402,F401  (pins the arch before cutlass compiles anything)
import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cutlass.cute.runtime import make_fake_tensor  # noqa: E402

from warpsched import (MemoryResource, StageInfo, Task, TaskManager, WorkAttr, domain_loop,  # noqa: E402
                       producer_work, schedule)
from warpsched.lower import LoweringError  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tools"))
from region_state_gpu import Ring, fill, ring_config  # noqa: E402  (the GPU check's ring and producer)

SEEN = []  # what the works saw while the kernel was traced


@dataclass(kw_only=True)
class Accumulate(MemoryResource):
    """Keeps a per-tile flag like an MMA's "accumulate into D" (cleared for a tile, set after its first step)."""

    out: Any = None
    python_flag: bool = False  # the flag as a plain Python bool: what a loop cannot carry
    flag: Any = field(init=False, default=None)

    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    def start_tile(self, stage_info: StageInfo):
        self.flag = cutlass.Boolean(False)
        if self.python_flag:
            self.flag = False

    @producer_work
    def step(self, stage_info: StageInfo):
        SEEN.append(("step", self.flag))
        self.flag = True

    @producer_work
    @cute.jit
    def mark(self, stage_info: StageInfo):
        bx, _, _ = cute.arch.block_idx()
        if bx == 0:  # CuTe DSL's own runtime if: it re-yields self's fields
            self.out[stage_info.loop_offset] = cutlass.Int32(1)

    @producer_work
    def finish(self, stage_info: StageInfo):
        SEEN.append(("after", self.flag))


@dataclass(kw_only=True)
class DeclaredFlag(Accumulate):
    """The TS documentation's per-tile state: a field declared ``cutlass.Boolean``, set to a Python ``False``
    per tile and to ``True`` by each step."""

    flag: cutlass.Boolean = field(init=False, default=None)

    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    def start_tile(self, stage_info: StageInfo):
        self.flag = False


@schedule
def producer(ring, acc, n, with_if=True):
    acc.start_tile()
    with domain_loop(0, n, 1):
        ring.acquire()
        ring.put()
        ring.commit()
        acc.step()
        if with_if:  # trace-time Python: whether a work with its own runtime if runs after step
            acc.mark()
    acc.finish()


@schedule
def consumer(ring, acc, n):
    with domain_loop(0, n, 1):
        ring.wait()
        ring.get()
        ring.release()
        acc.mark()  # the other task's works use the tensor the first task's runtime if re-yielded


def _compile(python_flag=False, acc_type=Accumulate):
    SEEN.clear()

    @cute.kernel
    def kern(out: cute.Tensor, n: cutlass.Int32, python_flag: cutlass.Constexpr):
        ring, acc = Ring(name="Ring", pipeline_config=ring_config()), acc_type(name="Acc", out=out,
                                                                        python_flag=python_flag)
        tasks = [Task(name="P", dst_resources=[ring, acc], warp_idx=0, num_warps=1, schedule=producer(ring, acc, n, with_if=not python_flag)),
                 Task(name="C", src_resources=[ring], dst_resources=[acc], warp_idx=1, num_warps=1,
                      schedule=consumer(ring, acc, n))]
        mgr = TaskManager(tasks=tasks, resource_dependency_graph={acc: [ring]}, verbose=False)
        mgr.setup_resources_and_tasks()
        mgr.run()

    @cute.jit
    def host(out: cute.Tensor, n: cutlass.Int32, python_flag: cutlass.Constexpr):
        kern(out, n, python_flag).launch(grid=[1, 1, 1], block=[64, 1, 1])

    out = make_fake_tensor(cutlass.Int32, (16,), (1,), assumed_align=16)
    compiled = cute.compile(host, out, cutlass.Int32(4), python_flag, options=_common.ptx_options())
    assert SEEN, "the kernel was not traced"
    return compiled


def _is_constant(v) -> bool:
    return isinstance(v, bool) or isinstance(getattr(v, "value", None), (bool, int))


def test_a_dsl_scalar_in_a_resource_is_carried_through_the_loop():
    compiled = _compile()
    seen = dict(SEEN)
    # the loop body reads the carried value, not the tile's constant False in every iteration ...
    assert isinstance(seen["step"], cutlass.Boolean) and not _is_constant(seen["step"])
    # ... and after the loop the attribute is the loop's result, not the Python True of the last trace
    assert isinstance(seen["after"], cutlass.Boolean) and not _is_constant(seen["after"])
    assert compiled.artifacts.PTX  # the tensor the DSL's if re-yielded in task P is put back for task C


def test_a_python_scalar_in_a_field_declared_as_a_dsl_type_is_carried():
    """NVIDIA's TS traces this loop body once with ``False`` (every K step clears the accumulator); the
    field's declaration says the value is a ``cutlass.Boolean``, so warpsched carries it as one."""
    _compile(acc_type=DeclaredFlag)
    seen = dict(SEEN)
    assert isinstance(seen["step"], cutlass.Boolean) and not _is_constant(seen["step"])
    assert isinstance(seen["after"], cutlass.Boolean) and not _is_constant(seen["after"])


def test_a_python_scalar_a_loop_body_changes_is_refused():
    with pytest.raises(Exception) as ei:
        _compile(python_flag=True)
    e = ei.value
    while e is not None and not isinstance(e, LoweringError):
        e = e.__cause__ or e.__context__
    assert isinstance(e, LoweringError), ei.value
    msg = str(e)
    assert "'flag'" in msg and "'Acc'" in msg and "False to True" in msg and "loop body" in msg
    assert "cutlass.Boolean(False)" in e.fix and "flag: cutlass.Boolean" in e.fix


@dataclass(kw_only=True)
class Cursor(MemoryResource):
    """A view that each step advances by one element: a DSL value other than a scalar, carried like one."""

    view: Any = None

    @producer_work
    @cute.jit
    def write_and_advance(self, stage_info: StageInfo):
        SEEN.append(("step", self.view))
        self.view[0] = cutlass.Int32(stage_info.loop_offset)
        self.view = cute.domain_offset((1,), self.view)

    @producer_work
    def finish(self, stage_info: StageInfo):
        SEEN.append(("after", self.view))


@schedule
def cursor_steps(ring, cur, n):
    with domain_loop(0, n, 1):
        ring.wait()
        ring.get()
        ring.release()
        cur.write_and_advance()
    cur.finish()


@dataclass(kw_only=True)
class UndeclaredCount(Cursor):
    """An undeclared Python int that each step turns into a runtime value (a sum of loop offsets)."""

    count: int = 0

    @producer_work
    @cute.jit
    def write_and_advance(self, stage_info: StageInfo):
        self.count = self.count + stage_info.loop_offset


@dataclass(kw_only=True)
class ChangedInOwnIf(Cursor):
    """An undeclared Python int that a work's own runtime if changes (CuTe DSL's if yields 0 or 5)."""

    count: int = 0

    @producer_work
    @cute.jit
    def write_and_advance(self, stage_info: StageInfo):
        bx, _, _ = cute.arch.block_idx()
        if bx == 0:
            self.count = 5


def _compile_cursor(align: int, state_type=Cursor, facts=None, **fields):
    """Compile the cursor program with ``state_type(**fields)`` as its state; what the works saw, as
    ``facts(value, entry_view)`` (default: whether it is not the entry view, whether it is a tensor)."""
    SEEN.clear()
    ENTRY = []

    @cute.kernel
    def kern(out: cute.Tensor, n: cutlass.Int32):
        ring, cur = Ring(name="Ring", pipeline_config=ring_config()), state_type(name="Cursor", view=out, **fields)
        ENTRY.append(cur.view)
        tasks = [Task(name="P", dst_resources=[ring], warp_idx=0, num_warps=1, schedule=fill(ring, n)),
                 Task(name="C", src_resources=[ring], dst_resources=[cur], warp_idx=1, num_warps=1,
                      schedule=cursor_steps(ring, cur, n))]
        mgr = TaskManager(tasks=tasks, resource_dependency_graph={cur: [ring]}, verbose=False)
        mgr.setup_resources_and_tasks()
        mgr.run()

    @cute.jit
    def host(out: cute.Tensor, n: cutlass.Int32):
        kern(out, n).launch(grid=[1, 1, 1], block=[64, 1, 1])

    out = make_fake_tensor(cutlass.Int32, (16,), (1,), assumed_align=align)
    cute.compile(host, out, cutlass.Int32(4), options=_common.ptx_options())
    facts = facts or (lambda v, entry: (v is not entry, isinstance(v, cute.Tensor)))
    # plain facts only: MLIR values must not be printed once the compile has closed
    return {k: facts(v, ENTRY[0]) for k, v in dict(SEEN).items()}


def test_a_tensor_view_a_loop_body_advances_is_carried():
    seen = _compile_cursor(align=4)
    # each step sees the previous step's view (a loop-carried value), not the view the loop started with,
    # and the work after the loop sees the loop's result: (not the entry view, a tensor)
    assert seen == {"step": (True, True), "after": (True, True)}


def _lowering_error(ei) -> LoweringError:
    e = ei.value
    while e is not None and not isinstance(e, LoweringError):
        e = e.__cause__ or e.__context__
    assert isinstance(e, LoweringError), ei.value
    return e


def test_a_view_whose_type_changes_in_a_loop_is_refused_with_the_attribute_and_the_fix():
    with pytest.raises(Exception) as ei:
        _compile_cursor(align=16)  # the offset view loses the 16-byte alignment: another MLIR type
    e = _lowering_error(ei)
    msg = str(e)
    package = os.path.dirname(os.path.abspath(__import__("warpsched").__file__)) + os.sep
    frames = [f.filename for f in traceback.extract_tb(e.__traceback__)]
    assert frames and not any(f.startswith(package) for f in frames), frames  # the user's frames only
    assert "'view'" in msg and "'Cursor'" in msg and "align<16>" in msg and "keeps its type" in msg
    assert "stage_info" in e.fix


@pytest.mark.parametrize("state_type,what", [(UndeclaredCount, "Int32"), (ChangedInOwnIf, "Int32")])
def test_an_undeclared_python_scalar_that_becomes_a_runtime_value_is_refused(state_type, what):
    # after the loop the attribute would go back to the Python 0, and every step would read 0: refused, where a
    # work's own if that re-yields an unchanged Python field (test_a_dsl_scalar_... above) is not
    with pytest.raises(Exception) as ei:
        _compile_cursor(align=4, state_type=state_type)
    e = _lowering_error(ei)
    msg = str(e)
    assert "'count'" in msg and "'Cursor'" in msg and f"from the Python 0 to a runtime {what}" in msg
    assert "count: cutlass.Int32" in e.fix
    # the schedule call whose work set it, in its task
    with open(__file__) as fh:
        line = next(i for i, text in enumerate(fh, 1) if "cur.write_and_advance()" in text)
    assert (e.location.file, e.location.line) == (__file__, line) and e.task.name == "C"
    assert "last set by Cursor.write_and_advance()" in msg


@dataclass
class Totals:
    """A user's dataclass held in a resource field: its fields cross the regions as the resource's do."""

    count: cutlass.Int32 = 0  # declared: a Python 0 taken as an Int32 at the loop's entry


@dataclass(kw_only=True)
class Counting(Cursor):
    totals: Any = None

    @producer_work
    def write_and_advance(self, stage_info: StageInfo):
        if self.totals is None:  # trace time: the first step traced creates it (before any region opens)
            raise AssertionError("the kernel builds totals")
        SEEN.append(("step", self.totals.count))
        self.totals.count = self.totals.count + 1

    @producer_work
    def finish(self, stage_info: StageInfo):
        SEEN.append(("after", self.totals.count))


def test_a_dataclass_held_in_a_resource_field_is_carried_like_the_resource():
    seen = _compile_cursor(4, Counting, facts=lambda v, entry: (type(v).__name__, _is_constant(v)), totals=Totals())
    # each step reads the previous step's count (a loop-carried Int32), and so does the work after the loop
    assert seen == {"step": ("Int32", False), "after": ("Int32", False)}, seen
