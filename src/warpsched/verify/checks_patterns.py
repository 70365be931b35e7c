"""The seed's patterns: ping-pong resources, split-consumer signaling, and the
head/loop producer overlap warning."""
from __future__ import annotations

from typing import Iterable, List

from ..errors import Finding
from ..model.enums import PipelineType
from ..model.ir import ScheduleResult, Section, StepKind
from ..model.pipeline_config import PipelineConfig
from ..model.task import Task
from ..protocol.barriers import protocol_of
from .findings_util import (F, config_of, declared, dedupe, good_config, graph_items, in_list, location_for,
                            rname, steps, targets, tasks_with)
from .program import Program

PINGPONG = "ping-pong resources"
SPLIT = "split-consumer signaling"
OVERLAP = "head/loop producer overlap"


def check(program: Program) -> Iterable[Finding]:
    out: List[Finding] = []
    out += _ping_pong(program)
    out += _split(program)
    out += _overlap(program)
    return dedupe(out)


def _ping_pong(program: Program) -> List[Finding]:
    out = []
    tasks = [t for t in program.tasks if isinstance(t, Task)]
    for r, ups in graph_items(program):
        if not any(u is r for u in ups):
            continue
        loc = location_for(program, r)
        cfg = config_of(r)
        if cfg is None:
            out.append(F(PINGPONG, f"{rname(r)} has a self-edge (ping-pong) but no pipeline_config", resource=r,
                         location=loc, expected="a pipeline_config with a synchronous consumer (AsyncAsync, TmaAsync "
                         "or UmmaAsync)", fix=f"attach e.g. PipelineConfig.create_async_async_pipeline_cfg(...) to "
                         f"{rname(r)}, or drop the self-edge"))
        elif (isinstance(cfg, PipelineConfig) and isinstance(cfg.pipeline_type, PipelineType)
              and protocol_of(cfg).consumer_async_release):  # an MMA consumer releases asynchronously
            out.append(F(PINGPONG, f"{rname(r)} is a ping-pong resource on a {cfg.pipeline_type.value} pipeline, whose "
                         "MMA consumer releases asynchronously", resource=r, location=cfg.location,
                         expected="a synchronous consumer: AsyncAsync, TmaAsync or UmmaAsync",
                         fix="use a pipeline type whose consumer is async threads"))
        readers = [t for t in tasks if in_list(r, declared(t, "src_resources"))]
        writers = [t for t in tasks if in_list(r, declared(t, "dst_resources"))]
        missing = [side for side, who in (("consumed (src_resources)", readers), ("produced (dst_resources)", writers))
                   if not who]
        if missing:
            out.append(F(PINGPONG, f"ping-pong resource {rname(r)} is never {' or '.join(missing)}", resource=r,
                         location=loc, expected=f"a task with {rname(r)} in dst_resources and a task with it in "
                         "src_resources", fix="add the missing side, or drop the self-edge"))
    return out


def _split(program: Program) -> List[Finding]:
    out = []
    try:
        resources = program.resources
    except Exception:  # noqa: BLE001
        return out
    for r in resources:
        cfg = good_config(r)
        if cfg is None or cfg.consumer_wait_signaling_threads is None:
            continue
        waiters = tasks_with(program, r, [StepKind.ConsumerWait])
        releasers = tasks_with(program, r, [StepKind.ConsumerRelease])
        split = bool(waiters) and bool(releasers) and {id(t) for t in waiters} != {id(t) for t in releasers}
        base = dict(resource=r, location=cfg.location)
        if not split:
            who = ", ".join(t.name for t in waiters) or "no task"
            out.append(F(SPLIT, f"{rname(r)} sets consumer_wait_signaling_threads but has no split consumer "
                         f"(wait and release both in {who})", expected="consumer_wait_signaling_threads unset "
                         "unless the wait and the release are in different tasks",
                         fix="drop consumer_wait_signaling_threads", **base))
        elif cfg.consumer_wait_signaling_threads == cfg.consumer_signaling_threads:
            out.append(F(SPLIT, f"{rname(r)}: consumer_wait_signaling_threads equals consumer_signaling_threads "
                         f"({cfg.consumer_signaling_threads})",
                         expected="a wait-side signaling set different from the release side's",
                         fix="drop consumer_wait_signaling_threads (the release side's setting applies)", **base))
    return out


def _overlap(program: Program) -> List[Finding]:
    out = []
    for t in program.tasks:
        if not isinstance(t, Task) or not isinstance(t.schedule, ScheduleResult):
            continue
        head, loop = {}, {}
        for s in steps(program, t):
            if s.kind is not StepKind.ProducerWork:
                continue
            for r in targets(s):
                if config_of(r) is None:
                    continue
                bucket = head if s.section is Section.HEAD else loop if s.section is Section.LOOP else None
                if bucket is not None:
                    bucket.setdefault(id(r), (r, s))
        for rid, (r, s) in head.items():
            if rid in loop:
                out.append(F(OVERLAP, f"{rname(r)}.{s.method}() produces in the head and "
                             f"{loop[rid][1].method}() again in the loop (at {loop[rid][1].location}); both see "
                             "loop_offset = 0", task=t, resource=r, location=s.location,
                             expected="a pipelined producer in the head only or in the loop only",
                             fix="produce in the loop only (or derive the head's tile from something other than "
                             "loop_offset)", severity="warning"))
    return out

