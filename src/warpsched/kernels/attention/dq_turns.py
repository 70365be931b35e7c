"""The dQ writer warp's side of the deterministic dQ hand-over (``attention.dq_order.dq_part_calls``, which
``backward.SmemDQ.reduce_add`` runs on the kernel's values): the turn word's wait and hand-on as the bound
GmemFlag verbs (lower/gmem_flags), and the add as the TMA reduce-add waited to completion."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cutlass.cute as cute

from ...lower.gmem_flags import bind
from ..gemm.fixup import SPIN_LIMIT
from . import backward_math as bmath
from . import dq_order


@dataclass(frozen=True, eq=False)
class DQTurnIO:
    """The dQ writer warp's side of ``dq_order.dq_part_calls``: every lane polls the Q block's word
    (acquire loads; bounded, so a broken hand-over shows as a wrong dQ, not a hang), the TMA reduce-add
    is waited for until its writes are done (not only its SMEM reads), and lane 0 hands the turn on with
    a release store after the warp has seen them. Frozen, so the DSL does not carry it through a runtime
    if (as StageInfo)."""

    g: Any
    v: Any
    s_dq: Any
    m_block: Any
    head: Any
    batch: Any
    col_block: int
    stage: Any = 0

    def wait(self, slot, value):
        bind(dq_order.DQ_TURNS, self.v.mSem).wait(slot, value, spin_limit=SPIN_LIMIT)

    def accumulate(self, slot):
        bmath.reduce_dq(self.g, self.v, self.s_dq, self.m_block, self.head, self.batch, self.col_block,
                        self.stage, complete=True)

    @cute.jit
    def signal(self, slot, value):
        cute.arch.sync_warp()  # the issuing lane has waited for its reduce-add's writes
        if cute.arch.lane_idx() == 0:
            bind(dq_order.DQ_TURNS, self.v.mSem).signal(slot, value)
