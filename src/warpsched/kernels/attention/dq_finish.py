"""The backward's dQ finished inside the kernel (``FlashAttentionBackward(dq_finish=True)``) as a GmemFlag
protocol the grid checker proves.

Every key block's CTA adds its part of dQ into the fp32 accumulator of each Q block that sees its keys (a TMA
reduce-add of each warp group's tile). Without this option a post-pass kernel converts the whole accumulator
to dQ once the backward has ended (``backward_post.DQConvert``: it reads the fp32 buffer back from HBM). With
it, the CTA whose add into a Q block is the last one converts that block itself, while it is still in L2: after
both of a step's adds are complete it counts itself on the Q block's word (an acq_rel add); the key block whose
add returns the number of key blocks before it reads the sum and stores dQ's rows. The words are zero at launch
(the pre-pass zeroes them with the accumulator, ``backward_prep.StatsPrep``). Which key block counts last is
whatever the hardware's order makes it: nothing waits for another CTA.

A step's count is taken one step later (``finish_step_calls``): the writer waits for the previous step's adds to
be complete, which by then they mostly are, rather than for its own just-issued adds (a wait that left the math
warp groups without a free dQ stage: 0.63x the kernel on the H200); the last step counts both.

``finish_calls`` is the hand-over, run twice: by the grid checker on the unit's ints (``finish_protocol``,
``python_when``, the model's recording ``GmemFlag`` / ``GmemWorkspace``) and by the kernel while it is traced
(``backward_resources.SmemDQ.finish``, ``dq_finish_io.DQFinishIO``). The slot and the last place come from the
deterministic dQ's ``dq_order.dq_turn``, the kernel's own unit and step functions.
"""
from __future__ import annotations

from ...model.gmem_flags import CrossCtaProtocol, GmemFlag, GmemWorkspace
from ..gemm.handover import python_branch, python_when
from . import dq_order

DQ_COUNTS = GmemFlag(name="dQ block arrivals (mSem)")
DQ_OUT = GmemWorkspace(name="dQ (mdQ)")


def finish_calls(slot, last, flag=DQ_COUNTS, acc=dq_order.DQ_ACCUM, out=DQ_OUT, when=python_when):
    """After a step's two adds into Q block ``slot`` are complete: count this key block (acq_rel); the one
    whose add returns ``last`` (the key blocks before it) reads the sum and writes dQ's rows of the block."""
    ticket = flag.add(slot, 1, acquire=True)

    def finish():
        acc.read(slot)
        out.write(slot)

    return when(ticket, last, finish)


def finish_step_calls(step, steps, turn, flag=DQ_COUNTS, acc=dq_order.DQ_ACCUM, out=DQ_OUT, when=python_when,
                      branch=python_branch):
    """The writer's counts after step ``step``'s adds (of ``steps``): the previous step's Q block, whose adds it
    has waited to be complete, and at the last step this step's too. ``turn(s)``: (slot, last) of step s."""
    branch(step > 0, lambda: finish_calls(*turn(step - 1), flag, acc, out, when))
    branch(step == steps - 1, lambda: finish_calls(*turn(step), flag, acc, out, when))


def step_calls(step, steps, turn):
    """One step of a unit as the kernel's dQ writer runs it: each warp group's tile added into the step's Q block
    (reduce-adds: a declared atomic accumulation), then ``finish_step_calls``."""
    for _ in range(dq_order.PARTS):
        dq_order.DQ_ACCUM.accumulate(turn(step)[0], atomic=True)
    finish_step_calls(step, steps, turn)


def finish_protocol(backward_class, causal=False, seqlen_q=256, heads=2, kv_heads=1, batches=1, calls=None,
                    key_blocks=(1, 2, 3), head_dim=64, block_m=64) -> CrossCtaProtocol:
    """The grid checker's view of ``backward_class`` with ``dq_finish`` (its own unit and step functions at
    ``head_dim``): one CTA per unit, CTAs starting in any order and interleaving (no CTA waits for another,
    so residency does not matter, and ``resident=False`` adds the launches where CTAs run one after another);
    each unit runs ``step_calls`` (the planted twins pass a mutated one as ``calls``) for every step."""
    calls = calls or step_calls

    def run_unit(g, u):
        def turn(step):
            slot, _, last = dq_order.dq_turn(g, u, step)
            return slot, last
        steps = g.steps_of(u)
        for step in range(steps):
            calls(step, steps, turn)

    name = f"attention backward dQ finished in the kernel ({'causal' if causal else 'full'})"
    return dq_order.grid_protocol(name, backward_class, run_unit, seqlen_q, heads, kv_heads, batches, key_blocks,
                                  head_dim=head_dim, causal=causal, block_m=block_m, flat_dq=True)


_PROVEN = {}


def require_safe(g):
    """The grid checker's verdict on the hand-over ``g`` (a backward with ``dq_finish``) runs: ``finish_protocol``
    with its causal flag over 1-3 key blocks, one query head per K/V head over 256 queries and two over 128 (two
    heads over 256 queries pass 200k states non-causal), once per process (about a second); a violation raises
    AttentionConfigError with the findings. The kernel calls it while it is traced."""
    from ...verify.checker.grid import check_grid
    from .masks import AttentionConfigError

    key = (g.causal, g.block_n, g.block_m)
    if key not in _PROVEN:
        _PROVEN[key] = [check_grid(finish_protocol(type(g), causal=g.causal, heads=h, seqlen_q=rows,
                                                   block_m=g.block_m, head_dim=g.head_dim))
                        for h, rows in ((1, 256), (2, 128))]
    bad = [r for r in _PROVEN[key] if r.verdict != "SAFE"]
    if bad:
        raise AttentionConfigError("dq_finish=True: the grid checker does not prove the dQ hand-over:\n"
                                   + "\n".join(r.report() for r in bad))
    return _PROVEN[key]
