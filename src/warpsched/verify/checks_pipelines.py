"""Pipeline configuration: field validity, thread counts and bytes, leader-routed
completions and CTA layout consistency. Interleaving rules are in checks_interleave.

Every expected number comes from protocol/ (barriers.py: arrivals and bytes; plan.py: which
verb signals a side and how many warps one operation covers), what the exhaustive checker and
the lowering read too.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Any, Iterable, List, Optional, Tuple

from ..errors import Finding
from ..model.enums import PipelineType, SignalingThreads
from ..model.ir import StepKind
from ..model.pipeline_config import PipelineConfig, cluster_shape_of, group_size
from ..model.resources import work_spec_of
from ..protocol.barriers import (CLC_RESPONSE_BYTES, PairRoute, cta_group_size, expected_group_size,
                                  expected_num_bytes, pair_route, protocol_of, signaling_warps, tx_pair_ctas)
from ..protocol.plan import cta_gated, expected_groups, op_warps, signaling_verb
from . import checks_interleave
from ..model.pipeline_fields import CONFIG, COUNTS, LAYOUT, LEADER, layout_ok  # check names shared with the factory
from .findings_util import (F, config_of, dedupe, is_int, is_pos_int, ignores_stage, is_stub, rname, steps,
                            tasks_with, valid_config)
from .findings_util import targets as targets_of
from .program import Program



def check(program: Program) -> Iterable[Finding]:
    out: List[Finding] = []
    resources = _pipelined(program)
    for r in resources:
        out += _fields(r)
    good = [r for r in resources if valid_config(config_of(r))]
    for r in good:
        out += _counts(program, r)
        out += _leader(program, r)
        out += _pairs(program, r)
        out += _stage_slices(program, r, config_of(r))
    out += _layouts(resources)
    out += checks_interleave.check(program, good)
    return dedupe(out)


def _pipelined(program: Program) -> List[Any]:
    try:
        return [r for r in program.resources if config_of(r) is not None]
    except Exception:  # noqa: BLE001 - malformed task lists are reported by checks_structure
        return []


# ------------------------------------------------------------------ field validity
def _fields(r: Any) -> List[Finding]:
    """A PipelineConfig's own fields were checked by its factory (model/pipeline_fields.py); what is
    left is a ``pipeline_config`` that is not one."""
    cfg = config_of(r)
    if isinstance(cfg, PipelineConfig):
        return []
    return [F(CONFIG, f"pipeline_config of {rname(r)} is {type(cfg).__name__}, not a PipelineConfig",
              resource=r, expected="a PipelineConfig from a create_*_pipeline_cfg factory",
              fix="build it with PipelineConfig.create_<type>_pipeline_cfg(...)")]


# ------------------------------------------------------------------ thread counts and bytes
def _side_tasks(program: Program, r: Any, side: str) -> Tuple[List[Any], StepKind]:
    """The tasks whose operations arrive on this side's barrier, and the verb that arrives
    (TMA / CLC producers arm the full barrier at acquire)."""
    verb = signaling_verb(config_of(r), side)
    return tasks_with(program, r, [verb]), verb


def _who(task: Any, by: Tuple[Any, ...]) -> str:
    """The tasks whose arrivals make a count, as the finding names them."""
    if len(by) <= 1:
        return f"task {task.name!r} ({task.num_warps} warp(s)) makes"
    return "tasks " + " and ".join(f"{t.name!r} ({t.num_warps} warp(s))" for t in by) + " together make"


def _counts(program: Program, r: Any) -> List[Finding]:
    cfg: PipelineConfig = config_of(r)
    out = []
    for side in ("producer", "consumer"):
        # per task when the signaling verb is interleaved (all must agree), else summed
        needs = expected_groups(program, r, side)
        if not needs:
            continue
        targets = [(t, sc, _who(t, by)) for t, sc, by in needs]
        field = f"{side}_group"
        if getattr(cfg, field) is None:  # left out: the sync plan derives it from these tasks
            sizes = sorted({sc.arrivals for _, sc, _ in targets})
            if len(sizes) > 1:
                t = targets[0][0]
                out.append(F(COUNTS, f"{rname(r)}: {field} is left out, but the tasks that signal it make "
                             f"different arrival counts per stage ({', '.join(map(str, sizes))}), so it cannot "
                             "be derived", task=t, resource=r, location=cfg.location,
                             expected="one arrival count per stage on every lane",
                             fix=f"declare {field}=warpsched.threads(n), or give the lanes' tasks equal warps"))
            continue
        size = group_size(getattr(cfg, field))
        forgot = _forgotten_release(program, r, side, size, targets) or _forgotten_stride(program, r, side, size,
                                                                                            needs)
        if forgot is not None:
            out.append(forgot)
            continue
        for t, sc, who in targets:
            if size == sc.arrivals or (sc.alternative is not None and size == sc.alternative):
                continue  # per-warp count, or the equivalent thread count (see SideCount)
            have = f"size {size}" if size is not None else f"{getattr(cfg, field)!r:.40} with no integer size"
            out.append(F(COUNTS, f"{rname(r)}: {field} is {have}, but {who} "
                         f"{sc.arrivals} {side} arrival(s) per stage on a {cfg.pipeline_type.value} pipeline",
                         task=t, resource=r, location=cfg.location,
                         expected=f"{field} size {sc.arrivals} = {sc.derivation}" + (
                             f" (or {sc.alternative}, the same warps counted in threads)"
                             if sc.alternative is not None else ""),
                         fix=f"{field}=warpsched.threads({sc.arrivals}), or leave it out (derived)"))
    out += _bytes(program, r)
    return out


def _forgotten_release(program: Program, r: Any, side: str, size, targets) -> Optional[Finding]:
    """A consumer group larger than the releasing tasks' arrivals, while another task waits on the
    resource and never releases it: the likely bug is that task's missing release(), not the group
    size (shrinking the group would free stages that task still reads). One finding, at its wait."""
    if side != "consumer" or not isinstance(size, int) or not targets:
        return None
    released = sum(sc.arrivals for _, sc, _ in targets)
    if size <= released:
        return None
    releasers = {id(t) for t, _, _ in targets}
    waiters = [t for t in tasks_with(program, r, [StepKind.ConsumerWait]) if id(t) not in releasers]
    if not waiters:
        return None
    t = waiters[0]
    wait = next(s for s in steps(program, t) if s.kind is StepKind.ConsumerWait and any(x is r for x in targets_of(s)))
    n = rname(r)
    who = " and ".join(f"{x.name!r}" for x, _, _ in targets)
    return F(COUNTS, f"{n}: consumer_group is size {size}, but only task(s) {who} release it ({released} arrival(s) "
             f"per stage); task {t.name!r} waits on {n} and never calls {n}.release()", task=t, resource=r,
             location=wait.location, expected=f"{n}.release() in {t.name!r} after the work on each stage it waited "
             f"for ({size} arrivals per stage in all)",
             fix=f"add {n}.release() to {t.name!r} after its last read of the stage (shrinking consumer_group "
                 f"instead would free stages {t.name!r} still reads)")


def _forgotten_stride(program: Program, r: Any, side: str, size, needs) -> Optional[Finding]:
    """Several tasks signal the side of a dense (stride-1) pipeline, each a domain lane (its
    domain_loop starts at its own lane and steps by the number of tasks), and the declared group is
    one lane's arrivals: the likely bug is a missing interleave_stride, not the group size (summing
    the group would make every lane wait on and release every stage, reading the other lanes' data).
    One finding, at the config, naming the field, the lanes' domain loops and the tuple to pass."""
    if len(needs) != 1 or len(needs[0][2]) < 2 or not isinstance(size, int):
        return None
    cfg: PipelineConfig = config_of(r)
    proto = protocol_of(cfg)
    if not (proto.interleave_producer if side == "producer" else proto.interleave_consumer):
        return None
    lanes = needs[0][2]
    n = len(lanes)
    loops = []
    for t in lanes:
        sched = program.schedule_of(t)
        dl = sched.domain_loop if sched is not None else None
        if dl is None or type(dl.start) is not int or dl.step != n:
            return None
        loops.append((t, dl))
    if sorted(dl.start % n for _, dl in loops) != list(range(n)):
        return None
    one = {expected_group_size(cfg, side, op_warps(cfg, signaling_verb(cfg, side), t.num_warps)).arrivals
           for t in lanes}
    if len(one) != 1 or size not in one:
        return None
    strides = list(cfg.strides)
    for i in ((0, 1) if side == "producer" else (2, 3)):
        strides[i] = n
    suggest = tuple(strides)
    field = f"{side}_group"
    factory = "create_" + re.sub(r"(?<!^)(?=[A-Z])", "_", cfg.pipeline_type.value).lower() + "_pipeline_cfg"
    t0 = lanes[0]
    described = " and ".join(f"{t.name!r} (domain_loop({dl.start}, {dl.end}, {dl.step}) at {dl.location})"
                             for t, dl in loops)
    verbs = "acquires and commits" if side == "producer" else "waits on and releases"
    data = "fills stages meant for" if side == "producer" else "reads stages filled for"
    return F(COUNTS, f"{rname(r)}: tasks {described} each take one iteration in {n}, as {n} lanes of "
             f"{rname(r)}'s stages, but its config has no interleave_stride on the {side} side: every lane "
             f"then {verbs} every stage ({n} x {size} arrivals on a {field} of {size}), and each lane {data} "
             "the others",
             task=t0, resource=r, location=cfg.location,
             expected=f"interleave_stride={suggest} in {factory}(...) ({n} lanes on the {side} verbs; "
                      f"{field} stays {size}, one lane's arrivals)",
             fix=f"pass interleave_stride={suggest} to {factory}(...) (enlarging {field} to {n * size} instead "
                 f"would make every lane {'acquire' if side == 'producer' else 'wait on'} every stage)")


def _bytes(program: Program, r: Any) -> List[Finding]:
    cfg: PipelineConfig = config_of(r)
    proto = protocol_of(cfg)
    out = []
    base = dict(resource=r, location=cfg.location)
    if not proto.transaction_bytes:
        if cfg.num_bytes:
            out.append(F(COUNTS, f"{rname(r)}: num_bytes={cfg.num_bytes} on a {cfg.pipeline_type.value} pipeline, "
                         "whose producer completes by arrival count, not by transaction bytes",
                         expected="num_bytes=0", fix="drop num_bytes", severity="warning", **base))
        if cfg.num_bytes_per_warp_per_cta is not None:
            out.append(F(LEADER, f"{rname(r)}: num_bytes_per_warp_per_cta on a {cfg.pipeline_type.value} pipeline "
                         "(no transaction barrier)", expected="only on TMA-produced pipelines",
                         fix="drop num_bytes_per_warp_per_cta", **base))
        return out
    if cfg.pipeline_type is PipelineType.ClcFetchAsync:
        if cfg.num_bytes != CLC_RESPONSE_BYTES:
            out.append(F(COUNTS, f"{rname(r)}: num_bytes={cfg.num_bytes} on a ClcFetchAsync pipeline",
                         expected=f"num_bytes={CLC_RESPONSE_BYTES} (one CLC response per stage)",
                         fix=f"num_bytes={CLC_RESPONSE_BYTES}", **base))
        return out
    if cfg.num_bytes == 0:
        out.append(F(COUNTS, f"{rname(r)}: num_bytes=0 on a {cfg.pipeline_type.value} pipeline: the full barrier "
                     "would complete before any TMA byte lands", expected="the bytes one stage's TMA loads deliver",
                     fix="num_bytes=<tile bytes per stage>", **base))
        return out
    armers, _verb = _side_tasks(program, r, "producer")
    out += _stage_bytes(r, cfg, dict(base, task=armers[0] if armers else None))
    for t in armers:
        if not is_pos_int(getattr(t, "num_warps", None)):
            continue
        arms = signaling_warps(cfg.producer_signaling_threads, t.num_warps)
        if cfg.num_bytes % arms:
            out.append(F(COUNTS, f"{rname(r)}: num_bytes={cfg.num_bytes} does not split over the {arms} arming "
                         f"warp(s) of task {t.name!r}", task=t,
                         expected=f"a multiple of {arms} ({arms} warps each arm num_bytes / {arms})",
                         fix="fix num_bytes, or route the completion through TaskWarpLeader", **base))
    return out


def _stage_slices(program: Program, r: Any, cfg: PipelineConfig) -> List[Finding]:
    """Stage s of a pipelined resource is the s-th equal slice of each of its SMEM allocations (the
    checker's access model, and what a staged layout is): an allocation that does not split into
    num_stages equal slices was sized for another ring."""
    try:
        allocs = list(r.get_smem_requirements() or [])
    except Exception:  # noqa: BLE001 - a requirement hook that needs a kernel context
        return []
    out = []
    if allocs and cfg.num_stages > 1:
        methods = [m for m in dir(type(r)) if work_spec_of(getattr(type(r), m, None)) is not None]
        # placeholder bodies (a model before its kernel) are judged when the kernel is traced
        real = [m for m in methods if not is_stub(r, m)]
        if real and all(ignores_stage(r, m) for m in methods):
            producers = _side_tasks(program, r, "producer")[0]
            # the checker's proof assumes stage s's work touches the s-th slice only: with one
            # address for every stage, a producer refills bytes a consumer of another stage still reads
            out.append(F(COUNTS, f"{rname(r)}: num_stages={cfg.num_stages}, but none of its work methods reads "
                         "stage_info.stage_idx, so every stage addresses the same SMEM bytes: the producer of "
                         "one stage overwrites what the consumer of another still reads", resource=r,
                         task=producers[0] if producers else None,
                         location=cfg.location, expected="work that indexes its SMEM by stage_info.stage_idx (or "
                         "num_stages=1)", fix="index the stage's slice with stage_info.stage_idx, or num_stages=1 "
                         "(an allocation of one stage)"))
    for a in allocs:
        try:
            size = a.size_bytes
        except Exception:  # noqa: BLE001 - a malformed allocation is reported by the smem capacity check
            continue
        if is_int(size) and size > 0 and size % cfg.num_stages:
            out.append(F(COUNTS, f"{rname(r)}: SMEM allocation {getattr(a, 'name', '?')!r} ({size} bytes) does not "
                         f"split into num_stages={cfg.num_stages} equal stages", resource=r, location=cfg.location,
                         expected=f"an allocation of num_stages x the stage size (a multiple of {cfg.num_stages})",
                         fix="size the allocation from the same stage count as the pipeline_config"))
    return out


def _stage_bytes(r: Any, cfg: PipelineConfig, base) -> List[Finding]:
    """num_bytes is what one stage's copies deliver into one CTA; the stage itself is the
    resource's SMEM allocations split in num_stages equal slices. More bytes than the stage holds
    can never land (the phase never completes, or a copy overflows into the next stage); fewer
    complete the phase while the rest of a full-stage copy is still landing (or, if the copies
    deliver fewer bytes than armed, never). A stage that is deliberately filled only in part is
    declared with ``partial_stage=True``."""
    try:
        allocs = list(r.get_smem_requirements() or [])
        total = sum(a.size_bytes for a in allocs)
    except Exception:  # noqa: BLE001 - a requirement hook that needs a kernel context, or no sizes
        return []
    if not allocs or not is_int(total) or total <= 0 or total % cfg.num_stages:
        return []
    stage = total // cfg.num_stages
    ctas = tx_pair_ctas(cfg)  # a CTA pair's loads land in each CTA's own stage, all on the leader's barrier
    if cfg.num_bytes % ctas or cfg.num_bytes // ctas == stage:
        return []
    more = cfg.num_bytes // ctas > stage
    if not more and cfg.partial_stage:
        return []
    what = ("more than a stage holds: the copies cannot deliver them, so the full barrier never completes (or a "
            "copy overflows into the next stage)" if more else
            "less than a stage holds: copies that fill the stage complete the phase before their last bytes land "
            "(the transaction count underflows), and copies of num_bytes leave part of every stage unwritten")
    per = f" ({cfg.num_bytes} over the {ctas} CTAs of a pair)" if ctas > 1 else ""
    want = stage * ctas
    fix = f"num_bytes={want}, or size the allocations to num_stages x the tile"
    held = total // (cfg.num_bytes // ctas) if cfg.num_bytes // ctas and not total % (cfg.num_bytes // ctas) else 0
    if not more and held > cfg.num_stages:  # sized for a deeper ring of num_bytes tiles (e.g. a stage dropped)
        what += f"; the allocations hold {held} stages of {cfg.num_bytes // ctas} bytes"
        fix = (f"num_stages={held}, or allocations of {cfg.num_stages} x {cfg.num_bytes // ctas} bytes (or "
               f"num_bytes={want} if the copies fill the larger stage)")
    if not more:
        fix += ", or, if the copies deliberately fill only part of each stage, declare partial_stage=True"
    return [F(COUNTS, f"{rname(r)}: num_bytes={cfg.num_bytes}{per}, but one stage of its SMEM allocations is {stage} "
              f"bytes ({total} bytes / {cfg.num_stages} stages): {what}",
              expected=f"num_bytes={want} (the bytes one stage's TMA loads deliver" +
              (f", x {ctas} CTAs of a pair)" if ctas > 1 else ")"), fix=fix, **base)]


# ------------------------------------------------------------------ leader-routed completions
def _leader(program: Program, r: Any) -> List[Finding]:
    cfg: PipelineConfig = config_of(r)
    proto = protocol_of(cfg)
    if not proto.transaction_bytes or cfg.pipeline_type is PipelineType.ClcFetchAsync:
        return []
    out = []
    base = dict(resource=r, location=cfg.location)
    sig: SignalingThreads = cfg.producer_signaling_threads
    per = cfg.num_bytes_per_warp_per_cta
    armers, verb = _side_tasks(program, r, "producer")
    armers = [t for t in armers if is_pos_int(getattr(t, "num_warps", None))]
    if (sig.cta_leader or per is not None) and cfg.cta_layout_vmnk is not None and cfg.cluster_shape is None:
        out.append(F(LEADER, f"{rname(r)}: cta_layout_vmnk cannot be inspected, so the producing CTAs cannot be "
                     "counted", expected="cta_layout_vmnk as a tuple of ints", fix="pass e.g. (1, 2, 1, 1)", **base))
        return out
    for t in armers:
        warps = op_warps(cfg, verb, t.num_warps)
        pair = tx_pair_ctas(cfg)
        covers = (sig.warp_leader and warps > 1) or (sig.cta_leader and cfg.num_ctas > 1) or pair > 1
        if per is None:
            if covers:
                who = " and ".join(x for x in ("TaskWarpLeader" if sig.warp_leader else "",
                                               "CtaLeader" if sig.cta_leader else "",
                                               f"the leader CTA of a {cfg.pipeline_type.value} pair" if pair > 1
                                               else "") if x)
                out.append(F(LEADER, f"{rname(r)}: {who} arms the transaction barrier for {warps} warp(s) x "
                             f"{cfg.num_ctas if sig.cta_leader else pair} CTA(s) of task {t.name!r}, but "
                             "num_bytes_per_warp_per_cta is not set, so the aggregate num_bytes cannot be checked",
                             task=t, expected="num_bytes_per_warp_per_cta=<one warp's bytes in one CTA>",
                             fix="declare num_bytes_per_warp_per_cta", **base))
            continue
        exp = expected_num_bytes(cfg, warps)
        if exp is not None and exp[0] != cfg.num_bytes:
            out.append(F(LEADER, f"{rname(r)}: num_bytes={cfg.num_bytes} does not cover every producer the leader "
                         f"arms for (task {t.name!r})", task=t, expected=f"num_bytes={exp[0]}: {exp[1]}",
                         fix=f"num_bytes={exp[0]}", **base))
    return out


# ------------------------------------------------------------------ CTA pairs (V = 2)
_WAIT = {"full": (StepKind.ConsumerWait, "consumer", "wait()"),
         "empty": (StepKind.ProducerAcquire, "producer", "acquire()")}


def _an(word: str) -> str:
    return ("an " if word[:1] in "AEIO" else "a ") + word  # "a UmmaAsync", "an AsyncUmma"


def _pairs(program: Program, r: Any) -> List[Finding]:
    """In a CTA pair, a barrier of the peer CTA that no operation reaches never completes
    (CUTLASS routes the side to the leader, or CtaLeader keeps the peer's own operation from
    running): whoever waits on it must run in the leader CTA only."""
    cfg: PipelineConfig = config_of(r)
    v = cta_group_size(cfg)
    if v == 1:
        return []
    base = dict(resource=r, location=cfg.location)
    ptype = cfg.pipeline_type.value
    if v > 2:
        return [F(LAYOUT, f"{rname(r)}: cta_layout_vmnk V = {v}, but a CTA group is at most a tcgen05 pair",
                  expected="V = 1 or 2 in cta_layout_vmnk=(V, m, n, k)", fix="use V = 2 (a CTA pair) or 1", **base)]
    out = []
    proto = protocol_of(cfg)
    for kind, side in (("full", "producer"), ("empty", "consumer")):
        route = pair_route(cfg, side)
        signal = signaling_verb(cfg, side)
        if route is PairRoute.LEADER:
            why = (f"CUTLASS arms only the leader CTA's full barrier of {_an(ptype)} pair and completes every "
                   "CTA's TMA on it" if proto.pair_arms_in_leader else
                   f"CUTLASS routes every CTA's {side} arrivals of {_an(ptype)} pair to the leader CTA's {kind} barrier")
        elif route is PairRoute.LOCAL and cta_gated(cfg, signal):
            sig = f"{side}_signaling_threads"
            why = (f"{sig}=CtaLeader keeps the peer CTA's {side} from arriving on its own {kind} barrier "
                   f"({_an(ptype)} pipeline's barriers are per CTA)")
        else:
            continue
        verb, waiter, call = _WAIT[kind]
        if cta_gated(cfg, verb):
            continue
        wait_field = (f"{waiter}_signaling_threads" if waiter == "producer" or cfg.consumer_wait_signaling_threads
                      is None else "consumer_wait_signaling_threads")
        have = getattr(cfg, wait_field)
        if wait_field == "consumer_wait_signaling_threads" and cfg.consumer_signaling_threads.cta_leader:
            fix = "drop consumer_wait_signaling_threads (the release side's CtaLeader then applies to the wait)"
        else:
            fix = f"pass {wait_field}=SignalingThreads.CtaLeader"
        if route is PairRoute.LOCAL:
            fix = f"drop CtaLeader from {side}_signaling_threads (each CTA signals its own barrier), or {fix}"
        for t in tasks_with(program, r, [verb]):
            out.append(F(LAYOUT, f"{rname(r)}: task {t.name!r} runs {rname(r)}.{call} in both CTAs of each pair "
                         f"({wait_field}={have.name or have}), but {why}, so the peer CTA's {call} never "
                         "completes", task=t, expected=f"a {waiter} side that waits in the leader CTA of each pair "
                         f"only ({wait_field}=CtaLeader)", fix=fix, **base))
    return out


# ------------------------------------------------------------------ CTA layout


def _layouts(resources: List[Any]) -> List[Finding]:
    out = []
    shapes = []
    for r in resources:
        cfg = config_of(r)
        if not isinstance(cfg, PipelineConfig) or not layout_ok(cfg.cta_layout_vmnk):
            continue
        typed = isinstance(cfg.pipeline_type, PipelineType)
        if cfg.cta_layout_vmnk is None and typed and protocol_of(cfg).needs_cta_layout:
            out.append(F(LAYOUT, f"{rname(r)}: a {cfg.pipeline_type.value} pipeline needs cta_layout_vmnk",
                         resource=r, location=cfg.location, expected="cta_layout_vmnk=(v, m, n, k)",
                         fix="pass the kernel's cluster layout, e.g. cta_layout_vmnk=(1, 1, 1, 1)"))
        shape: Optional[tuple] = cluster_shape_of(cfg.cta_layout_vmnk) or (1, 1, 1, 1)
        shapes.append((r, shape))
    if len({s for _, s in shapes}) <= 1:
        return out
    common = Counter(s for _, s in shapes).most_common()
    top = common[0][1]
    majority = next(s for _, s in shapes if dict(common)[s] == top)
    holders = [rname(r) for r, s in shapes if s == majority]
    for r, s in shapes:
        if s != majority:
            out.append(F(LAYOUT, f"{rname(r)}: cta_layout_vmnk {s} disagrees with {majority} of {', '.join(holders)}",
                         resource=r, location=config_of(r).location,
                         expected=f"cta_layout_vmnk={majority} (one cluster decomposition for the kernel)",
                         fix="use the kernel's cluster layout on every pipeline (None means (1, 1, 1, 1))"))
    return out
