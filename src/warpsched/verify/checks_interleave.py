"""Interleaved pipelines (interleave_stride > 1): per-type support, asymmetric strides, and the
two lane shapes (warp-lane and domain-lane). (A stride that does not divide num_stages is refused
by the PipelineConfig factory: model/pipeline_fields.py.)

Called from checks_pipelines with the resources whose config is well formed.
"""
from __future__ import annotations

from typing import Any, Dict, List

from ..errors import Finding
from ..model.ir import ScheduleResult, StepKind
from ..model.pipeline_fields import ROLE_NAMES
from ..protocol.barriers import protocol_of
from .findings_util import F, config_of, rname, strides_of, tasks_with
from .program import Program

INTERLEAVE = "interleaved pipelines"
ROLE_KINDS = ([StepKind.ProducerTryAcquire, StepKind.ProducerAcquire], [StepKind.ProducerCommit],
              [StepKind.ConsumerTryWait, StepKind.ConsumerWait], [StepKind.ConsumerRelease])


def check(program: Program, resources: List[Any]) -> List[Finding]:
    out: List[Finding] = []
    for r in resources:
        cfg = config_of(r)
        st = strides_of(cfg)
        if st is None or max(st) == 1:
            continue
        base = dict(resource=r, location=cfg.location)  # (strides dividing num_stages: the factory checks)
        out += _support(r, cfg, st, base)
        roles = [tasks_with(program, r, kinds) for kinds in ROLE_KINDS]
        out += _asymmetric(r, cfg, st, roles, base)
        out += _lanes(r, st, roles)
    return out


def _support(r, cfg, st, base) -> List[Finding]:
    proto = protocol_of(cfg)
    t = cfg.pipeline_type.value
    out = []
    if not proto.interleave_producer and not proto.interleave_consumer:
        return [F(INTERLEAVE, f"{rname(r)}: {t} pipelines do not support interleaving (interleave_stride="
                  f"{cfg.interleave_stride!r})", expected="interleave_stride=1",
                  fix="drop interleave_stride, or use a pipeline type that supports it", **base)]
    if not proto.interleave_producer and max(st[0], st[1]) > 1:
        out.append(F(INTERLEAVE, f"{rname(r)}: {t} supports interleaving only on its consumer side, but the producer "
                     f"strides are {st[:2]}", expected="producer_acquire and producer_commit strides of 1",
                     fix=f"interleave_stride=(1, 1, {st[2]}, {st[3]})", **base))
    if not proto.interleave_consumer and max(st[2], st[3]) > 1:
        out.append(F(INTERLEAVE, f"{rname(r)}: {t} supports interleaving only on its producer side, but the consumer "
                     f"strides are {st[2:]}", expected="consumer_wait and consumer_release strides of 1",
                     fix=f"interleave_stride=({st[0]}, {st[1]}, 1, 1)", **base))
    if proto.interleave_single_cta_only and cfg.num_ctas > 1:
        out.append(F(INTERLEAVE, f"{rname(r)}: {t} interleaving is limited to single-CTA pipelines, but "
                     f"cta_layout_vmnk={cfg.cluster_shape} has {cfg.num_ctas} CTAs",
                     expected="cta_layout_vmnk=(1, 1, 1, 1) or interleave_stride=1",
                     fix="interleave a single-CTA pipeline, or drop interleave_stride", **base))
    return out


def _asymmetric(r, cfg, st, roles, base) -> List[Finding]:
    out = []
    for (o, c, flag, opener, closer) in ((0, 1, "advance_on_acquire", "acquire", "commit"),
                                         (2, 3, "advance_on_wait", "wait", "release")):
        if st[o] == st[c]:
            continue
        if not getattr(cfg, flag):
            out.append(F(INTERLEAVE, f"{rname(r)}: {ROLE_NAMES[o]} stride {st[o]} != {ROLE_NAMES[c]} stride {st[c]} "
                         f"needs {flag}=True", expected=f"{flag}=True (separate {opener} and {closer} counters)",
                         fix=f"pass {flag}=True and drive {opener} and {closer} from separate tasks", **base))
        both = [t for t in roles[o] if any(t is x for x in roles[c])]
        for t in both:
            out.append(F(INTERLEAVE, f"{rname(r)}: task {t.name!r} drives both {opener} (stride {st[o]}) and "
                         f"{closer} (stride {st[c]})", task=t, resource=r, location=t.location,
                         expected=f"separate tasks for {opener} and {closer} when their strides differ",
                         fix=f"move the {closer}() calls to their own task (with {st[c]} lane(s))"))
    return out


def _lanes(r, st, roles) -> List[Finding]:
    out = []
    n = rname(r)
    for i, (role, s) in enumerate(zip(ROLE_NAMES, st)):
        if s == 1:
            continue
        domain_lanes: Dict[int, Any] = {}
        warp_lane = [t for t in roles[i] if t.num_warps == s]
        for t in roles[i]:
            sched = t.schedule
            d = sched.domain_loop if isinstance(sched, ScheduleResult) else None
            start = d.static_start if d is not None else None
            step = d.static_step if d is not None else None
            if t.num_warps == s:  # warp-lane: warp (warp_idx - warp_start) owns its lane
                if step == s and start is not None and (start != 0 or len(warp_lane) > 1):
                    out.append(F(INTERLEAVE, f"{n}: task {t.name!r} splits its domain into {s} lanes "
                                 f"(domain_loop({start}, end, {s})) but has num_warps == {s}, which selects "
                                 f"warp-lane mode for {role}", task=t, resource=r, location=d.location,
                                 expected=f"num_warps != {s} for a domain-lane sibling (or domain_loop(0, end, 1) "
                                 "for a warp-lane task)",
                                 fix=f"give each sibling a warp count other than {s}"))
                continue
            if start is None or step != s or not (0 <= start < s):
                got = ("no domain_loop" if d is None else f"domain_loop(start={d.start!r}, step={d.step!r})")
                out.append(F(INTERLEAVE, f"{n}: task {t.name!r} drives {role} (stride {s}) with {t.num_warps} "
                             f"warp(s) and {got}", task=t, resource=r, location=(d.location if d else t.location),
                             expected=f"warp-lane: num_warps == {s}; or domain-lane: domain_loop(lane, end, {s}) "
                             f"with a compile-time lane in [0, {s})",
                             fix=f"give the task {s} warps, or split it into {s} sibling tasks, one per lane"))
                continue
            opener, closer = (0, 1) if i < 2 else (2, 3)
            if st[opener] != st[closer]:
                out.append(F(INTERLEAVE, f"{n}: domain-lane task {t.name!r} needs matching {ROLE_NAMES[opener]} and "
                             f"{ROLE_NAMES[closer]} strides, got {st[opener]} and {st[closer]}", task=t, resource=r,
                             location=d.location, expected=f"equal strides on the {'producer' if i < 2 else 'consumer'}"
                             " side (one task-derived lane owns both counters)",
                             fix="use warp-lane tasks (num_warps == stride) for asymmetric strides"))
            if start in domain_lanes and domain_lanes[start] is not t:
                out.append(F(INTERLEAVE, f"{n}: tasks {domain_lanes[start].name!r} and {t.name!r} both own lane "
                             f"{start} of {role}", task=t, resource=r, location=d.location,
                             expected=f"one sibling task per lane 0..{s - 1}",
                             fix="give each sibling its own domain_start"))
            domain_lanes.setdefault(start, t)
        if domain_lanes:
            missing = [x for x in range(s) if x not in domain_lanes]
            if missing:
                t = next(iter(domain_lanes.values()))
                out.append(F(INTERLEAVE, f"{n}: {role} lane(s) {missing} have no domain-lane task: their stages are "
                             "never visited", task=t, resource=r, location=t.location,
                             expected=f"one sibling task per lane 0..{s - 1}",
                             fix=f"add tasks with domain_loop({missing[0]}, end, {s})"))
    return out
