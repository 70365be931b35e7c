"""PipelineGroup consistency: member configs compatible on the collapsed side, and the
collapsed stage emitted on the group object by the single task that drives it.

A Fork's members are pipeline views of one buffer that the one producer loads once: they declare
equal ``num_bytes`` and the shared full barrier expects that value once (protocol.barriers)."""
from __future__ import annotations

from typing import Iterable, List

from ..errors import Finding
from ..model.enums import PipelineGroupMode
from ..model.ir import StepKind
from ..model.pipeline_config import PipelineConfig, group_size
from ..model.pipeline_group import PipelineGroup
from ..model.resources import work_spec_of
from ..model.task import Task
from ..protocol.barriers import collapsed_lead_index, protocol_of
from ..protocol.plan import GROUP_VERBS
from .findings_util import F, config_of, dedupe, groups, is_resource, rname, steps, valid_config
from .program import Program

GROUP = "pipeline group consistency"

# The collapsed op(s) each mode emits on the group object (protocol.plan.GROUP_VERBS); the
# member verbs it forbids.
_VERB = {StepKind.ConsumerRelease: "release", StepKind.ProducerCommit: "commit", StepKind.ConsumerWait: "wait",
         StepKind.ConsumerTryWait: "try_wait", StepKind.ProducerAcquire: "acquire",
         StepKind.ProducerTryAcquire: "try_acquire"}


def check(program: Program) -> Iterable[Finding]:
    out: List[Finding] = []
    for g in groups(program):
        out += _members(g)
        if isinstance(g.mode, PipelineGroupMode):
            out += _wiring(program, g)
    return dedupe(out)


def _members(g: PipelineGroup) -> List[Finding]:
    out = []
    base = dict(resource=g.name if isinstance(g.name, str) else rname(g), location=g.location)
    if not isinstance(g.mode, PipelineGroupMode):
        return [F(GROUP, f"group mode {g.mode!r:.40} is not a PipelineGroupMode",
                  expected="PipelineGroupMode.Merge, .Fork or .FusedMerge", fix="pass mode=PipelineGroupMode.Merge",
                  **base)]
    members = g.members if isinstance(g.members, list) else []
    if len(members) < 2:
        out.append(F(GROUP, f"group {g.name!r} has {len(members)} member(s)", expected="at least 2 pipelined members",
                     fix="group two or more resources, or drop the group", **base))
    names = [getattr(m, "name", None) for m in members]
    for m, nm in zip(members, names):
        if not is_resource(m):
            out.append(F(GROUP, f"group member {m!r:.40} is not a MemoryResource", expected="pipelined resources",
                         fix="list resource objects in members=", **base))
        elif not isinstance(nm, str) or names.count(nm) > 1:
            out.append(F(GROUP, f"group member name {nm!r} is missing or not unique (members are addressed as "
                         "group.<name>)", expected="a unique name= on every member", fix="name each member", **base))
        elif not isinstance(config_of(m), PipelineConfig):
            out.append(F(GROUP, f"group member {nm} has no pipeline_config", expected="a pipelined member",
                         fix=f"attach a PipelineConfig to {nm}", **base))
    cfgs = [(m, config_of(m)) for m in members if is_resource(m) and valid_config(config_of(m))]
    if g.pipeline_config is not None:
        if valid_config(g.pipeline_config):
            cfgs.append((g, g.pipeline_config))
        else:
            out.append(F(GROUP, "the group's explicit pipeline_config is malformed", expected="a valid PipelineConfig",
                         fix="drop pipeline_config= (it is derived from the members)", **base))
    if len(cfgs) < 2:
        return out
    ref_m, ref = cfgs[0]
    side = g.mode.collapsed_side
    lead = collapsed_lead_index([c for _, c in cfgs], g.mode)
    size_ref_m, size_ref = cfgs[lead]
    kind = lambda c: protocol_of(c).producer_engine if side == "producer" else protocol_of(c).consumer_engine  # noqa
    for m, c in cfgs[1:]:
        if c.num_stages != ref.num_stages:
            out.append(F(GROUP, f"group {g.name!r}: {rname(m)} has num_stages={c.num_stages} but {rname(ref_m)} has "
                         f"{ref.num_stages}", expected=f"num_stages={ref.num_stages} on every member",
                         fix="give all members the same pipeline depth", **base))
        if kind(c) != kind(ref):
            out.append(F(GROUP, f"group {g.name!r} ({g.mode.value}) collapses the {side} side, but {rname(m)} "
                         f"({c.pipeline_type.value}) has {side} kind {kind(c)!r} and {rname(ref_m)} "
                         f"({ref.pipeline_type.value}) has {kind(ref)!r}", expected=f"one {side} kind on every member",
                         fix="group only members whose collapsed side is the same engine", **base))
    out += _collapsed_sizes(g, cfgs, lead, side, base)
    if g.mode is PipelineGroupMode.Fork:
        out += _fork_bytes(g, cfgs, base)
    return out


def _collapsed_sizes(g: PipelineGroup, cfgs, lead: int, side: str, base) -> List[Finding]:
    """One task drives the shared barrier, so the members that size it agree on its group. In a
    consumer-collapsing group that mixes TMA-fed members with others, the non-TMA members size
    it (``collapsed_lead_index``) and the TMA members' per-warp consumer_group does not apply."""
    field = f"{side}_group"
    ref_m, ref = cfgs[lead]
    tma = [protocol_of(c).producer_engine == "tma" for _, c in cfgs]
    mixed = side == "consumer" and any(tma) and not all(tma)
    out = []
    for m, c in cfgs:
        if m is ref_m or (mixed and tma[cfgs.index((m, c))]):
            continue
        a, b = group_size(getattr(c, field)), group_size(getattr(ref, field))
        if a != b:
            who = "the non-TMA members size it" if mixed else "one task drives the shared " + side + " barrier"
            out.append(F(GROUP, f"group {g.name!r}: {rname(m)}.{field} size {a} differs from {rname(ref_m)}'s {b}, "
                         f"but {who}", expected=f"{field} size {b} on every "
                         f"{'non-TMA ' if mixed else ''}member",
                         fix=f"size every {'non-TMA ' if mixed else ''}member's {field} for the one task that drives "
                         "the collapsed side", **base))
    return out


def _fork_bytes(g: PipelineGroup, cfgs, base) -> List[Finding]:
    """Fork members (and an explicit group config) declare the bytes of the one shared load."""
    values = [(rname(m), c.num_bytes, getattr(c, "location", "?")) for m, c in cfgs]
    if all(n == values[0][1] for _, n, _ in values):
        return []
    listed = ", ".join(f"{nm} num_bytes={n} (config at {loc})" for nm, n, loc in values)
    return [F(GROUP, f"Fork group {g.name!r}: members declare different num_bytes: {listed}; the one producer "
              "loads the data once and the shared full barrier expects num_bytes once (not the sum)",
              expected=f"one num_bytes on every member: the bytes of the one load ({values[0][1]} as "
              f"{values[0][0]} declares)",
              fix="give every member the bytes of the one load (Fork members are views of one buffer); "
              "members that hold different data need separate (ungrouped) pipelines", **base)]


def _wiring(program: Program, g: PipelineGroup) -> List[Finding]:
    out = []
    members = [m for m in (g.members if isinstance(g.members, list) else []) if is_resource(m)]
    ids = {id(m) for m in members}
    allowed = GROUP_VERBS[g.mode]
    forbidden_member = allowed - {StepKind.ConsumerTryWait} if g.mode is not PipelineGroupMode.FusedMerge else allowed
    side = g.mode.collapsed_side
    drivers = []
    for t in program.tasks:
        if not isinstance(t, Task):
            continue
        for s in steps(program, t):
            if s.resource is g:
                if s.kind not in allowed:
                    ok = ", ".join(f"{g.name}.{_VERB[k]}()" for k in sorted(allowed, key=lambda k: k.value))
                    out.append(F(GROUP, f"{g.name}.{s.method}() is not a collapsed op of a {g.mode.value} group",
                                 task=t, resource=g.name, location=s.location, expected=f"only {ok} on the group",
                                 fix=f"call {s.method}() per member: {g.name}.<member>.{s.method}()"))
                if s.kind.side == side and t not in drivers:
                    drivers.append(t)
            elif id(s.resource) in ids and s.kind in forbidden_member:
                out.append(F(GROUP, f"{rname(s.resource)}.{s.method}() on a member of {g.mode.value} group {g.name!r}: "
                             f"the collapsed {_VERB[s.kind]} must be emitted on the group", task=t,
                             resource=s.resource, location=s.location, expected=f"{g.name}.{_VERB[s.kind]}()",
                             fix=f"replace the member's {s.method}() with one {g.name}.{_VERB[s.kind]}()"))
            elif id(s.resource) in ids and s.kind.side == side and s.kind in _VERB and t not in drivers:
                drivers.append(t)
    if g.mode is PipelineGroupMode.Fork:
        out += _fork_loads(program, g, ids)
    if len(drivers) > 1:
        out.append(F(GROUP, f"the collapsed {side} side of group {g.name!r} is driven by "
                     f"{len(drivers)} tasks ({', '.join(t.name for t in drivers)})", task=drivers[1], resource=g.name,
                     location=g.location, expected=f"one task drives every member's {side} side",
                     fix="drive all members from one task, or drop the group"))
    return out


def _fork_loads(program: Program, g: PipelineGroup, ids) -> List[Finding]:
    """A transaction-byte Fork stage is loaded once: producer work on two members delivers the
    bytes twice to a barrier that expects them once (a hang, or a phase completing early)."""
    cfg = next((config_of(m) for m in g.members if valid_config(config_of(m))), None)
    if cfg is None or not protocol_of(cfg).transaction_bytes:
        return []
    out = []
    for t in program.tasks:
        if not isinstance(t, Task):
            continue
        loads = {}
        for s in steps(program, t):
            if id(s.resource) not in ids or s.kind is not StepKind.ProducerWork:
                continue
            spec = work_spec_of(getattr(type(s.resource), s.method, None))
            if (spec is not None and spec.auxiliary) or any(gd.kind in ("when_true", "when_false")
                                                            for gd in s.guards):
                continue  # auxiliary work delivers no bytes; value-guarded calls may be exclusive
            loads.setdefault(s.section, {}).setdefault(id(s.resource), s)
        for per_member in loads.values():
            if len(per_member) < 2:
                continue
            first, *rest = per_member.values()
            nbytes = getattr(config_of(first.resource), "num_bytes", "?")
            at = getattr(first.location, "line", "?")
            for s in rest:
                out.append(F(GROUP, f"{rname(s.resource)}.{s.method}() loads a second member of Fork group {g.name!r} "
                             f"in the stage {rname(first.resource)}.{first.method}() (line {at}) "
                             f"already loads: the shared full barrier expects {nbytes} bytes once per stage, and "
                             "each member's load delivers its num_bytes", task=t, resource=s.resource,
                             location=s.location, expected=f"one load per stage ({rname(first.resource)}."
                             f"{first.method}()) for all members of {g.name!r}",
                             fix="load the data once through one member (Fork members are views of one buffer); "
                             "members that hold different data need separate (ungrouped) pipelines"))
    return out
