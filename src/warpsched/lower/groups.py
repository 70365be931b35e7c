"""Pipeline groups: members share the barrier of their collapsed side (ts_pipeline_groups).

Layouts (S = num_stages, N members), in one array of ``group.num_barriers`` mbarriers:

* Merge      [full_0 x S] ... [full_{N-1} x S] [shared_empty x S]
* Fork       [shared_full x S] [empty_0 x S] ... [empty_{N-1} x S]
* FusedMerge [shared_full x S] [shared_empty x S]

Init counts come from ``protocol.barriers.barrier_init`` / ``group_barrier_init`` (what the checker
executes). Each member keeps a cutlass pipeline object assembled from its own full / empty view;
the group gets one for its collapsed verbs. A FusedMerge producer arrives on the shared full
barrier through a view with its own op and transaction bytes; a Fork of TMA producers arms the
shared full barrier once, at ``group.commit()``, with the members' common ``num_bytes`` (the data is
loaded once; member acquires only wait).
"""
from __future__ import annotations

from typing import Any, Dict, List

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as cpipe
from cutlass.pipeline.helpers import MbarrierArray, PipelineOp

from ..model.enums import PipelineGroupMode, PipelineType
from ..protocol.barriers import barrier_init, group_barrier_init, protocol_of
from . import LoweringError
from .pipelines import PipelineLowering, make_umma_umma

# (producer op, consumer op) per pipeline type, as the cutlass classes initialize them
OPS = {
    PipelineType.AsyncAsync: (PipelineOp.AsyncThread, PipelineOp.AsyncThread),
    PipelineType.TmaAsync: (PipelineOp.TmaLoad, PipelineOp.AsyncThread),
    PipelineType.TmaUmma: (PipelineOp.TmaLoad, PipelineOp.TCGen05Mma),
    PipelineType.UmmaAsync: (PipelineOp.TCGen05Mma, PipelineOp.AsyncThread),
    PipelineType.AsyncUmma: (PipelineOp.AsyncThread, PipelineOp.TCGen05Mma),
    PipelineType.UmmaUmma: (PipelineOp.TCGen05Mma, PipelineOp.TCGen05Mma),
}


def _cg(n: int):
    return cpipe.CooperativeGroup(cpipe.Agent.Thread, max(1, int(n)))


def _assemble(cfg, full, empty):
    """The cutlass pipeline object of ``cfg``'s type over the given sync objects (1 CTA)."""
    S = cfg.num_stages
    t = cfg.pipeline_type
    if t is PipelineType.UmmaUmma:
        return make_umma_umma(S, None, None, None, full=full, empty=empty)
    cls = getattr(cpipe, protocol_of(cfg).cutlass_class)
    if t is PipelineType.TmaAsync:
        tidx, _, _ = cute.arch.thread_idx()
        return cls(full, empty, S, None, None, tidx % 32 == 0)
    if t is PipelineType.TmaUmma:
        return cls(full, empty, S, None, None, cutlass.Boolean(True), cute.nvgpu.tcgen05.CtaGroup.ONE)
    if t in (PipelineType.UmmaAsync, PipelineType.AsyncUmma):
        return cls(full, empty, S, None, None, cute.nvgpu.tcgen05.CtaGroup.ONE)
    return cls(full, empty, S, None, None)


class GroupLowering:
    """Builds the shared barriers of one PipelineGroup and a PipelineLowering per member plus one
    for the group's collapsed verbs."""

    def __init__(self, program, group, base_ptr):
        self.group, self.mode = group, group.mode
        members = list(group.members)
        cfgs = [m.pipeline_config for m in members]
        loc = group.location
        for cfg in cfgs:
            if cfg is None or cfg.pipeline_type not in OPS:
                raise LoweringError(f"pipeline group member type {getattr(cfg, 'pipeline_type', None)} is not "
                                    "lowered in groups", resource=group, location=loc)
            if cfg.is_interleaved or cfg.num_ctas != 1:
                raise LoweringError("interleaved or cluster members of a pipeline group are checked but not "
                                    "lowered yet", resource=group, location=loc,
                                    fix="use per-resource pipelines for interleaved / cluster pipelines")
        S = cfgs[0].num_stages
        if any(c.num_stages != S for c in cfgs):
            raise LoweringError("pipeline group members disagree on num_stages", resource=group, location=loc)
        inits = [barrier_init(c) for c in cfgs]
        shared_full, shared_empty = group_barrier_init(members, self.mode)
        N = len(members)
        mk = lambda off, op, count, tx=0: MbarrierArray(base_ptr + off * S if off else base_ptr, S,  # noqa: E731
                                                         (op, _cg(count)), tx)
        fulls: List[Any] = []
        empties: List[Any] = []
        if self.mode is PipelineGroupMode.Merge:
            fulls = [mk(i, OPS[c.pipeline_type][0], inits[i].full_arrivals, inits[i].full_tx_bytes)
                     for i, c in enumerate(cfgs)]
            shared = mk(N, OPS[cfgs[0].pipeline_type][1], shared_empty.empty_arrivals)
            empties = [shared] * N
            group_full, group_empty = fulls[0], shared
        elif self.mode is PipelineGroupMode.Fork:
            shared = mk(0, OPS[cfgs[0].pipeline_type][0], shared_full.full_arrivals, shared_full.full_tx_bytes)
            fulls = [shared] * N
            empties = [mk(i + 1, OPS[c.pipeline_type][1], inits[i].empty_arrivals) for i, c in enumerate(cfgs)]
            group_full, group_empty = shared, empties[0]
        else:  # FusedMerge: one shared full (summed arrivals and bytes), one shared empty
            shared_f = mk(0, OPS[cfgs[0].pipeline_type][0], shared_full.full_arrivals, shared_full.full_tx_bytes)
            shared_e = mk(1, OPS[cfgs[0].pipeline_type][1], shared_empty.empty_arrivals)
            for i, c in enumerate(cfgs):  # each producer arrives with its own op and bytes: a view, no re-init
                view = shared_f.recast_to_new_op_type(OPS[c.pipeline_type][0])
                view.tx_count = inits[i].full_tx_bytes
                fulls.append(view)
            empties = [shared_e] * N
            group_full, group_empty = shared_f, shared_e
        self.members: Dict[int, PipelineLowering] = {}
        for m, cfg, full, empty in zip(members, cfgs, fulls, empties):
            pl = PipelineLowering(program, m, None, pipe=_assemble(cfg, full, empty))
            if self.mode is PipelineGroupMode.Fork and pl.arms_on_acquire:
                pl.arms_on_acquire = False  # the shared full barrier is armed once, by group.commit()
            self.members[id(m)] = pl
        self.collapsed = PipelineLowering(program, members[0], None, config=cfgs[0],
                                          pipe=_assemble(cfgs[0], group_full, group_empty))
        self.collapsed.resource = group
        if self.mode is PipelineGroupMode.Fork and protocol_of(cfgs[0]).producer_arms_on_acquire:
            self.fork_tx_bytes = shared_full.full_tx_bytes
            self.collapsed.commit = self._fork_arm_commit

    def _fork_arm_commit(self, task, warp_idx, state):
        """Fork of TMA producers: one arrive.expect_tx with the bytes of the one load."""
        pipe = self.collapsed.pipe

        def arm():
            pipe.sync_object_full.arrive_and_expect_tx(state.index, self.fork_tx_bytes)
        self.collapsed._gate(task, "producer", warp_idx, arm, sync_task=False)

