"""Shared resources and helpers for the tests of the static check families (no tests here).

Expected source lines are found by marker comments (``# @name``) in the calling test file,
so a test asserts the exact line of the offending call without hard-coding numbers.
"""
from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass
from typing import List, Optional

import pytest

import warpsched
from warpsched import (MemoryResource, StageInfo, TaskLocalVariable, TaskManager, WorkAttr, consumer_work,
                       producer_work)
from warpsched.examples._groups import thread_group

cg = thread_group


def line(marker: str, path: Optional[str] = None) -> int:
    """Line number of the ``# @marker`` comment in the calling test file."""
    path = path or inspect.stack()[1].filename
    tag = f"# @{marker}"
    with open(path) as f:
        hits = [i + 1 for i, text in enumerate(f) if text.rstrip().endswith(tag)]
    assert len(hits) == 1, f"marker {tag} found {len(hits)} times in {path}"
    return hits[0]


def manager(tasks, graph, **kw) -> TaskManager:
    kw.setdefault("verbose", False)
    kw.setdefault("exhaustive_deadlock_race_check", False)
    return TaskManager(tasks=tasks, resource_dependency_graph=graph, **kw)


def rejected(tasks, graph, **kw) -> List[warpsched.Finding]:
    with pytest.raises(warpsched.ValidationError) as info:
        manager(tasks, graph, **kw)
    assert isinstance(info.value, ValueError)
    return info.value.findings


def accepted(tasks, graph, **kw) -> TaskManager:
    """The program passes every static check (warnings allowed, errors not)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", warpsched.ValidationWarning)
        try:
            m = manager(tasks, graph, **kw)
        except warpsched.ValidationError as e:  # pragma: no cover - shows the findings on failure
            pytest.fail(f"expected the program to be accepted:\n{e}")
    assert m.result.errors == []
    return m


def find(findings, check: str, *, task=None, resource=None, line_no=None, severity="error"):
    """The findings of one check that match; fail with the full list when none does."""
    hits = [f for f in findings if f.check == check and f.severity == severity
            and (task is None or f.task == task) and (resource is None or f.resource == resource)
            and (line_no is None or f.line == line_no)]
    assert hits, f"no [{check}] finding for task={task!r} resource={resource!r} line={line_no}; got:\n" + \
        "\n".join(f.format() for f in findings)
    return hits


def expect(findings, check, task, resource, line_no, **kw):
    """Assert one finding names the check, task, resource and source line, and is actionable."""
    f = find(findings, check, task=task, resource=resource, line_no=line_no, **kw)[0]
    assert f.fix, f.format()
    assert f.expected, f.format()
    return f


def checks_of(findings) -> set:
    return {f.check for f in findings}


# ------------------------------------------------------------------ resources used by the tests
@dataclass(kw_only=True)
class Gmem(MemoryResource):
    """A global tensor: hands out coordinates, values, and stores results."""

    coords: object = TaskLocalVariable.uninitialized()
    value: object = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.coords = TaskLocalVariable(dtype="Int32", default=0, docs="tile coordinates")
        self.value = TaskLocalVariable(dtype="Float32", default=0, docs="loaded value")

    @consumer_work(returns=coords)
    def compute_coords(self, stage_info: StageInfo):
        return stage_info.loop_offset

    @consumer_work(returns=value)
    def load(self, stage_info: StageInfo):
        return 0

    @consumer_work
    def load_header(self, stage_info: StageInfo):
        return 0

    @producer_work
    def store(self, stage_info: StageInfo, value=None, acc=None):
        pass

    @producer_work
    def store_header(self, stage_info: StageInfo, header=None):
        pass

    def helper(self):  # deliberately not a work method
        return 0


@dataclass(kw_only=True)
class Buf(MemoryResource):
    """An SMEM/TMEM buffer with producer and consumer work of every flavour the tests need."""

    desc: object = TaskLocalVariable.uninitialized()
    val: object = TaskLocalVariable.uninitialized()
    cur: object = TaskLocalVariable.uninitialized()
    flag: object = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.desc = TaskLocalVariable(dtype="Uint64", default=0, docs="descriptor")
        self.val = TaskLocalVariable(dtype="Float32", default=0, docs="value")
        self.cur = TaskLocalVariable(dtype="Float32", default=0, docs="current contents")
        self.flag = TaskLocalVariable(dtype="Boolean", default=False, docs="condition")

    @producer_work
    def tma_load_a(self, stage_info: StageInfo, coord_k=None, coord_m=None):
        pass

    @producer_work
    def produce_tile(self, stage_info: StageInfo, value=None):
        pass

    @producer_work
    def mma(self, stage_info: StageInfo, desc_a=None, desc_b=None):
        pass

    @producer_work
    def write_next(self, stage_info: StageInfo, cur=None):
        pass

    @producer_work
    def signal_ready(self, stage_info: StageInfo):
        pass

    @producer_work(returns=val)
    def produce_and_report(self, stage_info: StageInfo):
        return 0

    @consumer_work(returns=desc)
    def build_desc(self, stage_info: StageInfo):
        return stage_info.stage_idx

    @consumer_work(returns=desc, work_attrs=WorkAttr.AUXILIARY)
    def aux_desc(self, stage_info: StageInfo):
        return stage_info.stage_idx

    @consumer_work(returns=val)
    def read(self, stage_info: StageInfo, value=None):
        return 0

    @consumer_work(returns=cur)
    def read_current(self, stage_info: StageInfo):
        return 0

    @consumer_work(returns=flag, work_attrs=WorkAttr.AUXILIARY)
    def needs_epilogue(self, stage_info: StageInfo):
        return False

    @consumer_work
    def consume_tile(self, stage_info: StageInfo):
        pass

    @consumer_work
    def transform_inplace(self, stage_info: StageInfo):
        pass

    @consumer_work
    def compute_softmax(self, stage_info: StageInfo):
        pass
