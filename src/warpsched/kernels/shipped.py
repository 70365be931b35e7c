"""The programs of the kernels warpsched ships: every configuration ``ops.gemm`` may pick on its own (the
autotuner's candidates over a grid of shapes, for bf16, fp16 and e4m3 -> bf16, each split-K form the host
plan can derive, and the deep-ring form it takes for a long K),
``ops.attention``'s tuned forward per head dim and mask (and its split-KV and varlen forms), and ``ops.attention_backward``'s kernels. What
``warpsched prove`` proves into the manifest (``warpsched.verify.manifest``) and what
``tests/test_proof_manifest.py`` checks against it. A configuration a user passes explicitly is not
here: its first compile searches, as before."""
from __future__ import annotations

from typing import Callable, Dict

import cutlass

_BF16, _F16, _E4M3 = cutlass.BFloat16, cutlass.Float16, cutlass.Float8E4M3FN
# (a, b when it differs from a, out): bf16 and fp16 with their own dtype out, e4m3 with a bf16 out (the
# dtypes are in the program: stage bytes, allocations). The other fp8 pairs and outputs ops.gemm takes
# are searched at their first compile, as a user's own configuration is.
GEMM_DTYPES = {False: [(_BF16, None, _BF16), (_F16, None, _F16)], True: [(_E4M3, None, _BF16)]}
# shapes whose candidate lists differ (gemm.autotune.candidates looks at M, N and M * N)
GEMM_SHAPES = [(16, 4096), (64, 14336), (128, 4096), (256, 14336), (1024, 1024), (1024, 14336), (4096, 4096)]


def _gemm_option_sets():
    """Every kernel-option dict ``gemm_host.plan`` can build from an autotune candidate (or the default
    configuration), for 16-bit and fp8 operands."""
    from .gemm.autotune import WAVE_FIT_BN, WAVE_FIT_CLUSTERS, candidates, normalize, wave_fit

    seen, out = set(), []
    # every wave-fit tile a 16-bit shape may pick (which ones depends on its SM count)
    wave_fits = {False: [wave_fit(bN, cluster, pdl) for bN in WAVE_FIT_BN
                         for cluster, pdl in (((1, 1), False),) + WAVE_FIT_CLUSTERS], True: []}
    for fp8 in (False, True):
        for M, N in GEMM_SHAPES:
            for deterministic in (True, False):
                for cand in [{"schedule": "cooperative"}] + candidates(M, N, 4096, fp8, deterministic, swap=True) \
                        + wave_fits[fp8]:
                    cfg = normalize(dict(cand))
                    if cfg.pop("swap_ab", False):  # the swapped plan's kernel: whole tiles, C column-major
                        cfg["c_major"] = "m"
                    split, reduce = cfg.pop("split_k", "auto"), cfg.pop("split_reduce", "host")
                    base = {k: tuple(v) if isinstance(v, list) else v for k, v in cfg.items()}
                    forms = [dict(base, stream_k=True)] if split == "stream" else [base]
                    if split == "auto" or (isinstance(split, int) and split > 1):  # 1 or more shares at run time
                        if base.get("schedule", "cooperative") == "cooperative" and \
                                tuple(base.get("cluster_mn", (1, 1))) == (1, 1):
                            if base.get("c_major") != "m":  # a swapped (column-major C) split reduces in the kernel
                                forms.append(dict(base, split_k=True))  # host reduce
                                forms.append(dict(base, split_k=True, split_reduce="parallel"))  # with an epilogue
                            if reduce != "host":
                                forms.append(dict(base, split_k=True, split_reduce=reduce))
                    for opts in forms:
                        key = (fp8, tuple(sorted(opts.items())))
                        if key not in seen:
                            seen.add(key)
                            out.append((fp8, opts))
    return out


def _deep_rings(opts, a, b, c):
    """The options ``gemm.host.deep_ring`` makes of ``opts`` for the K lengths that get a deeper ring."""
    from .gemm.host import deep_ring_depths, takes_deep_ring
    from .gemm.kernel import PersistentGemm

    if not takes_deep_ring(opts):
        return []
    fit = PersistentGemm(ab_dtype=a, b_dtype=b, c_dtype=c, **opts).ring_fit
    return [dict(opts, k_tiles_min=d) for d in deep_ring_depths(fit)]


def attention_forward_configs():
    """(label, head_dim, causal, options) of every dense forward kernel ``ops.attention`` picks by itself
    (``attention.host.kernel_options`` on a call without tuning keywords, mask_mod, softcap or window): the
    tuned kernel per head dim and mask, its split-KV form, and the sequence-length forms (causal hd64 from
    ``LONG_CAUSAL_HD64`` query rows, non-causal hd128 from ``LONG_FULL_HD128`` keys)."""
    from .attention import forward as att
    from .attention.host import LONG_CAUSAL_HD64, LONG_FULL_HD128, split_options, tuned_options

    out = []
    for hd in att.HEAD_DIMS:
        for causal in (False, True):
            name = f"attention hd{hd} {'causal' if causal else 'full'}"
            options = tuned_options(hd, causal)
            out += [(name, hd, causal, options), (name + " split_kv", hd, causal, split_options(options))]
            long = tuned_options(hd, causal, LONG_CAUSAL_HD64, LONG_FULL_HD128)
            if long != options:  # hd64 causal: three warp groups in a ring; hd128 full: 176-key tiles
                out.append((name + " long", hd, causal, long))
    return out


def programs() -> Dict[str, Callable[..., object]]:
    """label -> builder(**manager_options) returning the program's TaskManager (on the CPU)."""
    from .attention import forward as att
    from .attention import backward as ab
    from .attention.backward_host import default_options as default_bwd
    from .gemm import host as gemm_host
    from .attention.varlen import forward_kernel as varlen_kernel, queued_varlen_options, static_varlen_options
    from .gemm.kernel import PersistentGemm

    out: Dict[str, Callable[..., object]] = {}
    for fp8, opts in _gemm_option_sets():
        for a, b, c in GEMM_DTYPES[fp8]:
            label = (f"gemm {a.__name__}" + (f"x{b.__name__}" if b else "") + f"->{c.__name__} "
                     + " ".join(f"{k}={v}" for k, v in sorted(opts.items())))

            def build_gemm(opts=opts, a=a, b=b, c=c, **mo):
                return gemm_host.build(PersistentGemm(ab_dtype=a, b_dtype=b, c_dtype=c, **opts), **mo)
            out[label] = build_gemm
            for deep in _deep_rings(opts, a, b, c):  # gemm.host.deep_ring: a long K gets a deeper ring
                out[label + f" k_tiles_min={deep['k_tiles_min']}"] = (
                    lambda opts=deep, a=a, b=b, c=c, **mo:
                    gemm_host.build(PersistentGemm(ab_dtype=a, b_dtype=b, c_dtype=c, **opts), **mo))
    for label, hd, causal, options in attention_forward_configs():
        out[label] = (lambda hd=hd, causal=causal, options=options, **mo:
                      att.build(att.FlashAttention(head_dim=hd, causal=causal, **options), **mo))
    for hd in att.HEAD_DIMS:
        for causal in (False, True):
            out[f"attention hd{hd} {'causal' if causal else 'full'} varlen"] = (
                lambda hd=hd, causal=causal, **mo:
                att.build(varlen_kernel(hd, causal, **static_varlen_options(hd, causal)), **mo))
    for hd in att.HEAD_DIMS:  # GQA: causal units in the table's order (static_varlen_options' group)
        out[f"attention hd{hd} causal varlen gqa"] = (
            lambda hd=hd, **mo:
            att.build(varlen_kernel(hd, True, **static_varlen_options(hd, True, group=2)), **mo))
    out["attention hd64 full varlen short"] = (  # max_seqlen_q < SHORT_HD64_FULL: 128-row Q blocks
        lambda **mo: att.build(varlen_kernel(64, False, **static_varlen_options(64, False, 1)), **mo))
    for hd in att.HEAD_DIMS:  # the default: a queue the load warp fetches (queued_varlen_options; GQA the same)
        for causal in (False, True):
            out[f"attention hd{hd} {'causal' if causal else 'full'} varlen queued"] = (
                lambda hd=hd, causal=causal, **mo:
                att.build(varlen_kernel(hd, causal, **queued_varlen_options(hd, causal)), **mo))
    out["attention hd64 full varlen short queued"] = (
        lambda **mo: att.build(varlen_kernel(64, False, **queued_varlen_options(64, False, 1)), **mo))
    # the packed backward is the dense program (same fingerprint)
    packed_only = ("unit_in_regs", "zero_in_prep", "live_units")
    for hd in ab.BWD_HEAD_DIMS:
        packed = {k: v for k, v in default_bwd(hd, varlen=True).items() if k not in packed_only}
        for causal in (False, True):
            for opts in [dict(o) for o in dict.fromkeys(
                    tuple(sorted(o.items())) for o in ({}, packed, default_bwd(hd, full=not causal)))]:

                def build_bwd(hd=hd, causal=causal, opts=opts, **mo):
                    return ab.build(ab.FlashAttentionBackward(head_dim=hd, causal=causal, **opts), **mo)
                label = f"attention backward hd{hd} {'causal' if causal else 'full'}"
                out[label + "".join(f" {k}" for k in opts)] = build_bwd
    return out
