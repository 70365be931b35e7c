"""CuTe DSL backend: turns a checked Program into kernel code inside a ``@cute.kernel``.

Entry point: :class:`warpsched.lower.kernel.KernelLowering` (used by
``TaskManager.setup_resources_and_tasks()`` / ``run()``). Importing this package does not
import CuTe DSL; the submodules do.

Modules: ``kernel`` (setup / run), ``memory`` (one SMEM block, barrier storage, TMEM), ``context``
(KernelContext: what work methods read from the kernel),
``pipelines`` (one cutlass.pipeline object per resource, the six verbs, signaling, counters),
``groups`` (Merge / Fork / FusedMerge shared barriers), ``dispatch`` (warp ranges, setmaxnreg),
``loops`` (sections, guards, domain / work-tile loops, tokens, StageInfo), ``dsl`` (runtime for / if
with explicit carries), ``pdl`` (griddepcontrol).

What a schedule becomes:
  task                  ``if warp_idx in [warp_idx, warp_end)`` (warp uniform); warp groups with
                        ``num_registers`` first run setmaxnreg (inc above the launch share, dec below)
  acquire / commit      ``producer_acquire`` / ``producer_commit`` of the protocol's cutlass class
                        (TMA / CLC arm at acquire, commit is a no-op); try_acquire returns a token the
                        next acquire consumes (one bracket: never carried into a loop)
  wait / release        ``consumer_wait`` / ``consumer_release``; try_wait likewise
  TaskWarpLeader        the side's arrive runs in the task's first warp only, after a named barrier
                        over the task's warps (bar.sync 15 - task index) when threads arrive
  CtaLeader             the leader CTA of each CTA group (V mode) signals; on (1, m, n, 1) clusters
                        every CTA leads its own group (each arms its own barrier, for every byte
                        multicast into it); in a CTA pair (V = 2) the peer skips the verb (its counter
                        still advances), and a task whose every verb is gated runs in the leader only
  CTA pairs             TmaUmma / UmmaAsync / AsyncUmma over (2, 1, 1, 1): CUTLASS's pair-aware classes
                        with the pair's layout (leader-only arming, tcgen05.commit cta_group::2
                        multicast, remote arrivals to the leader); TMEM alloc / dealloc cta_group::2
  counters              one PipelineState per counter of the sync plan (protocol/plan.py): one per
                        side, advanced by the side's closing verb; advance_on_acquire / advance_on_wait
                        split it in two; interleave lanes start a counter on its lane (warp-lane:
                        warp - warp_idx; domain-lane: start % stride) and advance it by the stride
  domain_loop           ``scf.for`` (runtime bounds, unroll); first_iter() blocks peel iteration 0
  guards                first / last / every on the iteration, when_true / when_false on the token,
                        skippable() on the WorkQueue's skip predicate
  work_tile_loop        static queue: ``for t in range(blockIdx.x, tiles, gridDim.x)``, its verbs are the
                        induction variable; CLC queue (ClcFetchAsync): ``while tile valid``, fetch =
                        clusterlaunchcontrol.try_cancel into the acquired stage, get_and_advance = decode
                        the waited response; dynamic domains call the Task's provider per tile
  work                  ``WorkSpec.fn(resource, StageInfo(loop_offset, stage_idx, barrier, work_tile,
                        context), **tokens, **const_args)``; a value read outside the loop / guard that
                        produced it is carried with its TaskLocalVariable default; ``context`` is the one
                        KernelContext (module ``context``: SMEM views, cluster coordinate, the run's values)
  end of a task         producer_tail on every dense pipeline the task acquired
  UmmaUmma              no cutlass class in 4.8.1: assembled from two TCGen05Mma MbarrierArrays
                        (tcgen05.commit on both sides)
Refused with a LoweringError (never emitted differently from what the checker verified):
CLC queues over clusters, clusters other than TmaAsync / AsyncAsync over (1, m, n, 1) and CTA pairs
other than TmaUmma / UmmaAsync / AsyncUmma (async-thread producers) over (2, 1, 1, 1), CtaLeader
releases on a multicast pipeline, interleaved / cluster members of pipeline groups, a domain-lane counter without a compile-time start or with step != stride, values
escaping a runtime region without a typed default.
"""
from __future__ import annotations


class LoweringError(ValueError):
    """A program the checker accepted but this backend cannot (yet) lower faithfully.

    Raised at trace time with the task, resource and schedule call location, never
    silently emitting different barrier traffic than the checker verified.
    """

    def __init__(self, message: str, *, task=None, resource=None, location=None, fix=None):
        parts = [message]
        if task is not None:
            parts.append(f"task: {getattr(task, 'header', task)}")
        if resource is not None:
            parts.append(f"resource: {getattr(resource, 'display_name', resource)}")
        if location is not None:
            parts.append(f"at: {location}")
        if fix:
            parts.append(f"fix: {fix}")
        super().__init__(" | ".join(parts))
        self.task, self.resource, self.location, self.fix = task, resource, location, fix


def resource_name(resource) -> str:
    """How a traced finding names a resource: its name, else its class's."""
    return getattr(resource, "name", None) or type(resource).__name__


def reject_traced(finding, skip_validation=False, stacklevel=4) -> None:
    """A finding about what a work body did while the kernel was traced (lower/tx_bytes.py, footprints.py,
    wgmma_watch.py): the traced kernel is rejected with it, or with ``TaskManager(skip_validation=True)`` it is
    a warning, as the static findings are."""
    from ..errors import ValidationError, ValidationWarning

    if skip_validation:
        import warnings

        warnings.warn(ValidationWarning(finding.format()), stacklevel=stacklevel)
        return
    raise ValidationError([finding], title="warpsched rejected the traced kernel")


__all__ = ["LoweringError", "reject_traced", "resource_name"]
