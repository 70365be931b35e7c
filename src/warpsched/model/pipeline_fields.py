"""The field rules of a PipelineConfig, checked once when a factory builds it.

Each rule looks at the configuration alone (types, ranges, strides against the stage count, the
cluster layout's shape); what depends on the tasks that use the resource (arrival counts, bytes
against the copies) is the static checks' job (verify/checks_pipelines.py). A configuration that
breaks a rule is never built: the factory raises a ValidationError whose findings name the field,
the value, the factory call's file:line, what was expected and the fix. So everything downstream
(the sync plan, the checks, the checker, the lowering) reads well-formed fields and parses none.
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

from ..errors import Finding
from .enums import AsyncProducerOp, PipelineType, SignalingThreads

CONFIG = "pipeline configuration"
COUNTS = "pipeline thread counts and bytes"
LEADER = "leader-routed producer completions"
LAYOUT = "cta layout consistency"
INTERLEAVE = "interleaved pipelines"
SPLIT = "split-consumer signaling"
ROLE_NAMES = ("producer_acquire", "producer_commit", "consumer_wait", "consumer_release")
LEGAL_SIGNALING = "All, CtaLeader, TaskWarpLeader or CtaLeader | TaskWarpLeader"


def is_int(x: Any) -> bool:
    return type(x) is int


def is_pos_int(x: Any) -> bool:
    return type(x) is int and x >= 1


def legal_signaling(x: Any) -> bool:
    return isinstance(x, SignalingThreads) and x.is_legal


def layout_ok(layout: Any) -> bool:
    """None (single CTA) or an inspectable 4-tuple of positive ints."""
    if layout is None:
        return True
    shape = layout if isinstance(layout, tuple) else getattr(layout, "shape", None)
    return isinstance(shape, tuple) and len(shape) == 4 and all(is_pos_int(x) for x in shape)


def mcast_ok(mode: Any) -> bool:
    if mode is None or isinstance(mode, bool):
        return True
    return isinstance(mode, tuple) and len(mode) == 2 and all(isinstance(x, (bool, int)) for x in mode)


def parse_strides(stride: Any) -> Optional[Tuple[int, int, int, int]]:
    """(producer_acquire, producer_commit, consumer_wait, consumer_release) from an int or a
    4-tuple of ints >= 1; None when malformed. The one place a stride is parsed."""
    if is_pos_int(stride):
        return (stride, stride, stride, stride)
    if isinstance(stride, tuple) and len(stride) == 4 and all(is_pos_int(x) for x in stride):
        return stride  # type: ignore[return-value]
    return None


def field_findings(cfg: Any) -> List[Finding]:
    """Every rule ``cfg``'s fields break (empty: well formed)."""
    out: List[Finding] = []
    loc = cfg.location

    def bad(check, field, value, expected, fix):
        out.append(Finding(check=check, message=f"{cfg.pipeline_type_name} pipeline: {field}={value!r:.60} is "
                           "invalid", location=loc, expected=expected, fix=fix))

    if not isinstance(cfg.pipeline_type, PipelineType):
        bad(CONFIG, "pipeline_type", cfg.pipeline_type, "a PipelineType", "use a create_*_pipeline_cfg factory")
    if not is_pos_int(cfg.num_stages):
        bad(CONFIG, "num_stages", cfg.num_stages, "an int >= 1", "give the pipeline depth, e.g. num_stages=2")
    for f in ("advance_on_wait", "advance_on_acquire", "partial_stage"):
        if not isinstance(getattr(cfg, f), bool):
            bad(CONFIG, f, getattr(cfg, f), "True or False", f"pass {f}=True or leave it unset")
    if not isinstance(cfg.async_producer_op, AsyncProducerOp):
        bad(CONFIG, "async_producer_op", cfg.async_producer_op, "AsyncThread or AsyncLoad", "use AsyncThread")
    for f in ("producer_signaling_threads", "consumer_signaling_threads"):
        if not legal_signaling(getattr(cfg, f)):
            bad(COUNTS, f, getattr(cfg, f), LEGAL_SIGNALING, "All is exclusive; combine only CtaLeader | TaskWarpLeader")
    w = cfg.consumer_wait_signaling_threads
    if w is not None and not legal_signaling(w):
        bad(SPLIT, "consumer_wait_signaling_threads", w, f"None or one of {LEGAL_SIGNALING}", "leave it unset")
    if not (is_int(cfg.num_bytes) and cfg.num_bytes >= 0):
        bad(COUNTS, "num_bytes", cfg.num_bytes, "an int >= 0 (bytes per stage)", "give the stage's byte count")
    per = cfg.num_bytes_per_warp_per_cta
    if per is not None and not (is_int(per) and per >= 0):
        bad(LEADER, "num_bytes_per_warp_per_cta", per, "None or an int >= 0", "give one warp's bytes in one CTA")
    strides = parse_strides(cfg.interleave_stride)
    if strides is None:
        bad(INTERLEAVE, "interleave_stride", cfg.interleave_stride,
            "an int >= 1, or a 4-tuple of ints >= 1 (producer_acquire, producer_commit, consumer_wait, "
            "consumer_release)", "use interleave_stride=1 (no interleaving) or the lane count")
    elif is_pos_int(cfg.num_stages):
        for role, s in zip(ROLE_NAMES, strides):
            if cfg.num_stages % s:  # a lane's stages are every s-th: the ring must hold whole lanes
                out.append(Finding(
                    check=INTERLEAVE, location=loc,
                    message=f"num_stages={cfg.num_stages} is not divisible by the {role} stride {s}",
                    expected=f"num_stages a multiple of {s}",
                    fix=f"num_stages={(cfg.num_stages // s + 1) * s} (or a stride that divides it)"))
    if not layout_ok(cfg.cta_layout_vmnk):
        sig = cfg.producer_signaling_threads
        if (legal_signaling(sig) and (sig.cta_leader or sig.warp_leader)) or per is not None:
            # the seed's case: a leader-routed completion needs the CTA count
            out.append(Finding(check=LEADER, location=loc,
                               message=f"cta_layout_vmnk={cfg.cta_layout_vmnk!r:.40} cannot be inspected, so the CTAs "
                               "a leader-routed completion covers cannot be counted",
                               expected="cta_layout_vmnk as a (v, m, n, k) tuple of ints >= 1",
                               fix="pass a tuple such as (1, 2, 1, 1)"))
        else:
            bad(LAYOUT, "cta_layout_vmnk", cfg.cta_layout_vmnk, "None or an inspectable (v, m, n, k) of ints >= 1",
                "pass a tuple such as (1, 1, 1, 1), or a static CuTe layout")
    if not mcast_ok(cfg.mcast_mode_mn):
        bad(LAYOUT, "mcast_mode_mn", cfg.mcast_mode_mn, "None, a bool, or an (m, n) pair of bools",
            "pass mcast_mode_mn=(True, False) or leave it unset")
    return out
