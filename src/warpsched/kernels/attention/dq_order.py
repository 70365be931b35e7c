"""The backward's deterministic dQ (``FlashAttentionBackward(deterministic=True)``) as a GmemFlag protocol
the grid checker proves.

Every key block's CTA adds its part of dQ into the Q blocks that see its keys (a TMA reduce-add of each
warp group's fp32 tile). With fp32 atomics the order of those adds, and so the rounding, changes from run
to run. Deterministic: the key blocks that add into one Q block (of one batch and query head) take turns
in key-block order, through one GMEM word per Q block: key block n waits until the word reads its place
among them, adds its two parts, each complete before the next is issued, and hands the turn on. The word
is zero at launch (the host zeroes it per call); the last key block leaves it.

``dq_part_calls`` is the hand-over, run twice: by the grid checker on the unit's ints (``dq_protocol``,
``python_branch``, the model's recording ``GmemFlag`` / ``GmemWorkspace``) and by the kernel while it is
traced (``backward.SmemDQ.reduce_add``: a runtime branch, the flag bound to its GMEM words and the TMA
reduce-add). ``dq_turn`` computes the slot and the turn from the kernel's own unit and step functions
(``backward_units``), so the order the checker proves is the order the kernel walks.
"""
from __future__ import annotations

import cutlass

from ...model.gmem_flags import CrossCtaProtocol, GmemFlag, GmemWorkspace
from ..gemm.handover import python_branch

DQ_TURNS = GmemFlag(name="dQ block turns (mSem)")
DQ_ACCUM = GmemWorkspace(name="dQ fp32 accumulator (mdQacc)")
PARTS = 2  # one dQ tile per consumer warp group and step


def key_blocks_of(g, unit, m_block):
    """(first, last) key block whose steps include Q block ``m_block`` of ``unit``'s sequence: the
    inverse of ``first_m_block`` / ``end_m_block`` (every key block between them includes it, since both
    grow with the key block). Closed forms, branch-free on device values; empty (first > last) for a Q
    block no key block reaches."""
    _, seqlen_q, _, seqlen_k = g.seq_bounds(unit)
    n = g.block_n
    last = (seqlen_k + n - 1) // n - 1
    if cutlass.const_expr(g.causal):  # key block k reaches Q blocks from k * n // g.block_m on
        last = cutlass.min(last, m_block * g.block_m // n + (g.block_m - 1) // n)
    elif cutlass.const_expr(g.window_right is not None):
        # the block's last query: its end, or S_q's last row (BackwardUnits.steps_of cuts the same way)
        last_query = cutlass.min(m_block * g.block_m + g.block_m - 1, seqlen_q - 1)
        last = cutlass.min(last, (last_query + g.window_right) // n)
    first = 0
    if cutlass.const_expr(g.window_left is not None):  # reached while its last key >= the block's start - left
        first = cutlass.max(m_block * g.block_m - g.window_left, 0) // n
    return first, last


def dq_turn(g, unit, step):
    """(slot, order, last) of step ``step`` of ``unit``: the GMEM word of its (batch, query head, Q block),
    this key block's place among the key blocks that add into that Q block, and the last place."""
    n_block, _, batch = g.unit_coords(unit)
    head, m_block, _ = g.step_coords(unit, step)
    first, last = key_blocks_of(g, unit, m_block)
    slot = (batch * g.heads + head) * g.m_blocks + m_block
    return slot, n_block - first, last - first


def slot_coords(g, slot):
    """(batch, query head, Q block) of ``dq_turn``'s word ``slot``."""
    m_block, bh = slot % g.m_blocks, slot // g.m_blocks
    return bh // g.heads, bh % g.heads, m_block


def dq_part_calls(slot, order, last, part, flag=DQ_TURNS, acc=DQ_ACCUM, branch=python_branch):
    """One step's dQ part ``part`` (0, then 1): the first part waits for the key block's turn on the Q
    block (the first key block's turn is the word's launch value, 0: it does not wait), every part adds
    its tile (complete before the next call), the last part hands the turn on (the last key block keeps
    it: the host zeroes the words before the next launch)."""
    branch(part == 0, lambda: branch(order > 0, lambda: flag.wait(slot, order)))
    acc.accumulate(slot)
    branch(part == PARTS - 1, lambda: branch(order < last, lambda: flag.signal(slot, order + 1)))


def dq_protocol(backward_class, causal=False, window_size=None, seqlen_q=256, heads=2, kv_heads=1, batches=1,
                calls=None, grids=None, key_blocks=(1, 2, 3), head_dim=64, block_m=64) -> CrossCtaProtocol:
    """The grid checker's view of ``backward_class`` (``backward.FlashAttentionBackward``: its own unit and
    step functions at ``head_dim``, whose key blocks are 128 keys, or 64 at 256): one CTA per unit (the
    backward's grid), CTAs starting in order when they are not all resident (``resident=False``), every
    key-block count in ``key_blocks`` (S_k = block_n x that); each unit
    runs the kernel's steps with ``calls`` (default ``dq_part_calls``; the planted twins pass a mutated one)."""
    calls = calls or dq_part_calls

    def run_unit(g, u):
        for step in range(g.steps_of(u)):
            slot, order, last = dq_turn(g, u, step)
            for part in range(PARTS):
                calls(slot, order, last, part)

    name = f"attention backward deterministic dQ ({'causal' if causal else 'full'}, window {window_size})"
    return grid_protocol(name, backward_class, run_unit, seqlen_q, heads, kv_heads, batches, key_blocks, grids,
                         head_dim=head_dim, causal=causal, window_size=window_size, block_m=block_m)


def grid_protocol(name, backward_class, run_unit, seqlen_q, heads, kv_heads, batches, key_blocks, grids=None,
                  **options) -> CrossCtaProtocol:
    """A ``CrossCtaProtocol`` over the grid of ``backward_class(**options)``: one CTA per unit (the backward's grid),
    CTAs interleaving or starting in order (``resident=False``), every key-block count in ``key_blocks`` (S_k =
    block_n x that); each unit runs ``run_unit(g, unit)`` on the kernel object ``g`` of its launch."""
    units_of = {}

    def kernel(n_keys):
        if n_keys not in units_of:
            # tma_stats: what 128-row blocks need to build (the units do not depend on it)
            g = backward_class(tma_stats=True, **options)
            g.grid_setup(seqlen_q, n_keys * g.block_n, heads, kv_heads, batches)
            units_of[n_keys] = g
        return units_of[n_keys]

    def units(n_keys):
        return kernel(n_keys).num_units

    def assignment(cta, ctas, n_keys):
        return [(n_keys, cta)] if cta < units(n_keys) else []

    def body(grid, unit):
        n_keys, u = unit
        run_unit(kernel(n_keys), u)

    return CrossCtaProtocol(name, assignment, body, grids=grids or [units(n) for n in key_blocks],
                            unit_counts=key_blocks, valid=lambda ctas, n: ctas == units(n), resident=False)


_PROVEN = {}


def require_safe(g):
    """The grid checker's verdict on the hand-over ``g`` (a deterministic backward) runs: ``dq_protocol``
    with its causal flag and window over 1-3 key blocks, 1 and 2 query heads per K/V head, computed once
    per process (well under a second); a violation raises AttentionConfigError with the findings. The
    kernel calls it while it is traced, so no deterministic kernel compiles on a hand-over the checker
    has not proven."""
    from ...verify.checker.grid import check_grid
    from .masks import AttentionConfigError

    window = None if g.window_left is None and g.window_right is None else (g.window_left, g.window_right)
    key = (g.causal, window, g.block_n, g.block_m)
    if key not in _PROVEN:  # the kernel's blocks: 128 keys (64 at head dim 256), 64 or 128 query rows
        _PROVEN[key] = [check_grid(dq_protocol(type(g), causal=g.causal, window_size=window, heads=h,
                                               head_dim=256 if g.d_split else 64, block_m=g.block_m))
                        for h in (1, 2)]
    bad = [r for r in _PROVEN[key] if r.verdict != "SAFE"]
    if bad:
        raise AttentionConfigError("deterministic=True: the grid checker does not prove the dQ hand-over:\n"
                                   + "\n".join(r.report() for r in bad))
    return _PROVEN[key]
