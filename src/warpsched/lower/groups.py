"""Pipeline groups: members share the barrier of their collapsed side (ts_pipeline_groups).

The layout, init counts, transaction bytes and arrival ops of every array come from the sync
plan (``protocol.plan.GroupPlan``, what the checker executes); this module only builds the
cutlass objects. In one array of ``group.num_barriers`` mbarriers (S = num_stages, N members):

* Merge      [full_0 x S] ... [full_{N-1} x S] [shared_empty x S]
* Fork       [shared_full x S] [empty_0 x S] ... [empty_{N-1} x S]
* FusedMerge [shared_full x S] [shared_empty x S]

Each member keeps a cutlass pipeline object assembled from its own full / empty view; the group
gets one for its collapsed verbs, built on the lead member's protocol (``GroupPlan.lead_plan``: the
non-TMA member of a Merge that mixes TMA-fed and thread-fed members, so its release arrives with
every thread). A FusedMerge producer arrives on the shared full barrier
through a view with its own op and transaction bytes; a Fork of TMA producers arms the shared
full barrier once, at ``group.commit()``, with the members' common ``num_bytes`` (the data is
loaded once; member acquires only wait).
"""
from __future__ import annotations

from typing import Any, Dict

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as cpipe
from cutlass.pipeline.helpers import MbarrierArray, PipelineOp

from ..model.enums import PipelineGroupMode, PipelineType
from ..model.ir import StepKind
from ..protocol.plan import SyncPlan
from . import LoweringError
from .pipelines import PipelineLowering, make_umma_umma


def _cg(n: int):
    return cpipe.CooperativeGroup(cpipe.Agent.Thread, max(1, int(n)))


def _assemble(proto, num_stages, full, empty):
    """The cutlass pipeline object of ``proto``'s type over the given sync objects (1 CTA)."""
    S = num_stages
    t = proto.ptype
    if t is PipelineType.UmmaUmma:
        return make_umma_umma(S, None, None, None, full=full, empty=empty)
    cls = getattr(cpipe, proto.cutlass_class)
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

    def __init__(self, plan: SyncPlan, group, base_ptr):
        self.group, self.mode = group, group.mode
        gp = plan.group(group)
        loc = group.location
        for m in group.members:
            cfg = getattr(m, "pipeline_config", None)
            if cfg is None or cfg.pipeline_type is PipelineType.ClcFetchAsync:
                raise LoweringError(f"pipeline group member type {getattr(cfg, 'pipeline_type', None)} is not "
                                    "lowered in groups", resource=group, location=loc)
            if cfg.is_interleaved or cfg.num_ctas != 1:
                raise LoweringError("interleaved or cluster members of a pipeline group are checked but not "
                                    "lowered yet", resource=group, location=loc,
                                    fix="use per-resource pipelines for interleaved / cluster pipelines")
        S = gp.members[0].config.num_stages
        if any(mp.config.num_stages != S for mp in gp.members):
            raise LoweringError("pipeline group members disagree on num_stages", resource=group, location=loc)
        made: Dict[int, Any] = {}

        def storage(array):  # one MbarrierArray per array of the plan's layout, initialised once
            if id(array) not in made:
                ptr = base_ptr + array.position * S if array.position else base_ptr
                made[id(array)] = MbarrierArray(ptr, S, (PipelineOp[array.op], _cg(array.init)), array.tx_bytes)
            return made[id(array)]

        for array in gp.arrays:
            storage(array)
        self.members: Dict[int, PipelineLowering] = {}
        for mp in gp.members:
            full, empty = storage(mp.full), storage(mp.empty)
            if self.mode is PipelineGroupMode.FusedMerge:
                # each producer arrives with its own op and bytes: a view of the shared barrier, no re-init
                full = full.recast_to_new_op_type(PipelineOp[mp.protocol.producer_op])
                full.tx_count = mp.arm_tx_bytes
            pipe = _assemble(mp.protocol, S, full, empty)
            self.members[id(mp.resource)] = PipelineLowering(plan, mp.resource, None, pipe=pipe)
        self.collapsed = PipelineLowering(plan, group, None,
                                          pipe=_assemble(gp.lead_plan.protocol, S, storage(gp.full),
                                                         storage(gp.empty)))
        if gp.fork_arms_once:
            self.fork_tx_bytes = gp.fork_tx_bytes
            self.collapsed.commit = self._fork_arm_commit

    def _fork_arm_commit(self, task, warp_idx, state):
        """Fork of TMA producers: one arrive.expect_tx with the bytes of the one load."""
        pipe = self.collapsed.pipe

        def arm():
            pipe.sync_object_full.arrive_and_expect_tx(state.index, self.fork_tx_bytes)
        self.collapsed._gate(task, StepKind.ProducerCommit, warp_idx, arm, sync_task=False)

