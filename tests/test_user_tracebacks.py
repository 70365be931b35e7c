"""A rejection shows the user's frames only: warpsched's own frames (and the CuTe DSL frames of the runtime
regions the lowering opens) are left out of its traceback, at each entry point a user calls; an internal error
keeps every frame, and so does ``WARPSCHED_TRACEBACK=full``."""
from __future__ import annotations

import os
import traceback
from dataclasses import dataclass

import pytest

from warpsched import (MemoryResource, PipelineConfig, ScheduleError, Task, TaskManager, ValidationError,
                       consumer_work, domain_loop, producer_work, schedule)
from warpsched.errors import user_facing

PACKAGE = os.path.dirname(os.path.abspath(__import__("warpsched").__file__)) + os.sep


def _files(exc: BaseException):
    return [f.filename for f in traceback.extract_tb(exc.__traceback__)]


@dataclass(kw_only=True)
class Ring(MemoryResource):
    @producer_work
    def put(self, stage_info):
        pass

    @consumer_work
    def get(self, stage_info):
        pass


@schedule
def producer(ring):
    with domain_loop(0, 4, 1):
        ring.acquire()
        ring.put()
        ring.commit()


@schedule
def consumer_one_short(ring):
    with domain_loop(0, 3, 1):  # one iteration fewer: a stage nobody consumes
        ring.wait()
        ring.get()
        ring.release()


@schedule
def two_loops(ring):
    with domain_loop(0, 4, 1):
        ring.get()
    with domain_loop(0, 4, 1):  # a schedule has one domain loop: refused while it is captured
        ring.get()


def _manager():
    cfg = PipelineConfig.create_async_async_pipeline_cfg(num_stages=2, producer_group=32, consumer_group=32)
    ring = Ring(name="Ring", pipeline_config=cfg)
    tasks = [Task(name="P", dst_resources=[ring], warp_idx=0, num_warps=1, schedule=producer(ring)),
             Task(name="C", src_resources=[ring], warp_idx=1, num_warps=1, schedule=consumer_one_short(ring))]
    return TaskManager(tasks=tasks, resource_dependency_graph={ring: []}, verbose=False)


def test_a_rejected_program_shows_no_warpsched_frame(monkeypatch):
    monkeypatch.delenv("WARPSCHED_TRACEBACK", raising=False)
    with pytest.raises(ValidationError) as info:
        _manager()
    files = _files(info.value)
    assert files and not any(f.startswith(PACKAGE) for f in files), files
    assert files[-1] == __file__  # the innermost frame is the user's call


def test_a_malformed_schedule_shows_the_users_schedule_line(monkeypatch):
    monkeypatch.delenv("WARPSCHED_TRACEBACK", raising=False)
    cfg = PipelineConfig.create_async_async_pipeline_cfg(num_stages=2, producer_group=32, consumer_group=32)
    with pytest.raises(ScheduleError) as info:
        two_loops(Ring(name="Ring", pipeline_config=cfg))
    files = _files(info.value)
    assert not any(f.startswith(PACKAGE) for f in files), files
    assert files[-1] == __file__  # the schedule function's own frame, at its second loop


def test_warpsched_traceback_full_keeps_every_frame(monkeypatch):
    monkeypatch.setenv("WARPSCHED_TRACEBACK", "full")
    with pytest.raises(ValidationError) as info:
        _manager()
    assert any(f.startswith(PACKAGE) for f in _files(info.value))


def test_an_internal_error_keeps_its_frames():
    @user_facing
    def broken():
        return {}["missing"]  # what a bug in warpsched raises: not a rejection

    with pytest.raises(KeyError) as info:
        broken()
    assert any("test_user_tracebacks" in f for f in _files(info.value))
    assert len(_files(info.value)) >= 2


def test_a_rejected_pipeline_configuration_shows_the_users_call(monkeypatch):
    monkeypatch.delenv("WARPSCHED_TRACEBACK", raising=False)
    with pytest.raises(ValidationError) as info:
        PipelineConfig.create_async_async_pipeline_cfg(num_stages=0, producer_group=32, consumer_group=32)
    assert _files(info.value) == [__file__]  # no factory, dataclass __init__ or __post_init__ frame
