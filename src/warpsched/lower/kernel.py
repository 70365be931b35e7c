"""KernelLowering: ``setup()`` allocates memory and barriers, ``run()`` dispatches tasks.

Called by ``TaskManager.setup_resources_and_tasks()`` / ``run()`` inside a ``@cute.kernel``.
The launch must use ``program.num_warps * 32`` threads per CTA (and
``min_blocks_per_mp=1`` when tasks set ``num_registers``, so setmaxnreg takes effect).
"""
from __future__ import annotations

from typing import Dict

import cutlass
import cutlass.cute as cute

from ..compat.dsl import smem_block_array
from ..model.resources import WorkQueue
from ..protocol.barriers import CLC_RESPONSE_BYTES
from ..protocol.plan import SyncPlan
from . import LoweringError, region_state, wgmma_watch
from .dispatch import dispatch
from .dsl import dyn_if
from .loops import TaskEmitter
from .context import KernelContext, KernelValues, cluster_coordinate
from .memory import SmemSetup, tmem_columns
from .groups import GroupLowering
from .pipelines import PipelineLowering, cluster_shape_mn


class KernelLowering:
    def __init__(self, program, plan: SyncPlan, *, producer_tail: bool = True, tmem_ptr_i32=None):
        """``plan``: the program's verified sync plan, as TaskManager hands it (``SyncPlan.of``):
        the lowering derives no protocol decision of its own."""
        self.program = program
        self.user_tmem_ptr = tmem_ptr_i32  # TaskManager(tmem_ptr_i32=...): the kernel owns TMEM
        self.plan = plan
        self.two_cta = self.plan.cta_pair > 1  # a CTA pair: TMEM is allocated for the pair (cta_group::2)
        self.producer_tail = producer_tail
        self.pipes: Dict[int, PipelineLowering] = {}
        self.clc_response: Dict[int, object] = {}  # dynamic WorkQueue id -> SMEM response buffer
        self.warp_idx = None
        self.context = KernelContext()
        self._tmem_cols = 0
        self._setup_done = False

    # ------------------------------------------------------------------ setup
    def setup(self):
        program = self.program
        self.warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        smem = SmemSetup(program)
        sa = program.smem_allocator
        ba = program.barrier_allocator
        if ba is not None and ba.num_barriers is None:
            ba.compute_layout()
        base = smem.block(sa)
        block = smem_block_array(base, sa.total_bytes) if base is not None else None
        self.context = KernelContext(program=program, smem_allocator=sa, smem_base=block, smem_ptr=base,
                                     tmem_allocator=program.tmem_allocator, warp_idx=self.warp_idx)
        if sa is not None:
            sa.bind(self.context)  # SmemAllocator.get() / .smem_base read the context's block
        ta = program.tmem_allocator
        user_slot = self.user_tmem_ptr
        if user_slot is None and sa is not None and sa.tmem_ptr is not None:
            user_slot = sa.get(sa.tmem_ptr)
        if user_slot is not None:
            # The kernel allocates TMEM itself around run() (the TS allocator docs' flow): publish its
            # slot, emit no tcgen05.alloc / dealloc here.
            self.context.tmem_ptr_i32 = user_slot
        elif ta is not None:
            if ta.total_columns is None:
                ta.compute_layout()
            self._tmem_cols = tmem_columns(ta.total_columns or 0) if ta.total_columns else 0
            if self._tmem_cols:
                self.context.tmem_ptr_i32 = smem.tmem_slot()
        for group in program.pipeline_groups:
            gl = GroupLowering(self.plan, group, smem.barriers_for_group(group))
            self.pipes.update(gl.members)
            self.pipes[id(group)] = gl.collapsed
        for res in program.pipelined_resources:
            if (isinstance(res, WorkQueue) and not res.is_dynamic) or id(res) in self.pipes:
                continue
            self.pipes[id(res)] = PipelineLowering(self.plan, res, smem.barriers_for(res))
            if isinstance(res, WorkQueue):  # one response per stage (tile_queues)
                self.clc_response[id(res)] = smem.cutlass_alloc.allocate(
                    CLC_RESPONSE_BYTES * res.pipeline_config.num_stages, CLC_RESPONSE_BYTES)
        cluster = cluster_shape_mn(program)
        self.context.cluster_mn = cluster
        self.context.cluster_coord = cluster_coordinate(cluster)
        if self.pipes:
            cute.arch.mbarrier_init_fence()
        if self._tmem_cols:
            self._alloc_tmem()
        if cluster != (1, 1) or self.two_cta:
            # peers arrive on (and multicast into) this CTA's barriers: the whole cluster must see them
            # initialized
            cute.arch.cluster_arrive_relaxed()
            cute.arch.cluster_wait()
        elif self.pipes or self._tmem_cols:
            cute.arch.barrier()
        if self._tmem_cols:
            self.context.tmem_base = cute.arch.retrieve_tmem_ptr(cutlass.Float32, 16, self.context.tmem_ptr_i32)
        self._setup_done = True

    def _alloc_tmem(self):
        def alloc(env):
            cute.arch.alloc_tmem(self._tmem_cols, self.context.tmem_ptr_i32, is_two_cta=self.two_cta or None)
            cute.arch.relinquish_tmem_alloc_permit(is_two_cta=self.two_cta or None)
        dyn_if({}, [], self.warp_idx == 0, alloc)

    def context_for(self, task) -> KernelContext:
        ctx = self.context
        ctx.task = task
        return ctx

    # ------------------------------------------------------------------ run
    def run(self, values=None):
        """Dispatch every task; ``values`` (name -> trace-time value) become ``StageInfo.context.values``."""
        if not self._setup_done:
            raise LoweringError("run() before setup_resources_and_tasks()")
        self.context.values = KernelValues(values or {})
        with wgmma_watch.watching(self.context.wgmma_events), region_state.carrying(self.program.resources):
            dispatch(self, lambda t: TaskEmitter(self, t).emit())  # works' state in resources: region_state
        if self._tmem_cols:
            cute.arch.barrier()  # every task is done with TMEM
            if self.two_cta:  # the leader's MMAs write the peer's TMEM: free once both CTAs are done
                cute.arch.cluster_arrive()
                cute.arch.cluster_wait()

            def free(env):
                cute.arch.dealloc_tmem(self.context.tmem_base, self._tmem_cols, is_two_cta=self.two_cta or None)
            dyn_if({}, [], self.warp_idx == 0, free)

