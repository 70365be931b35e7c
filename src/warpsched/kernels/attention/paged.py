"""Host side of the attention forward over a paged K/V cache (``warpsched.ops.attention_paged``, as
flash_attn's ``page_table`` / ``seqused_k``): q (B, H, S_q, D) in SDPA's layout, ``k_cache`` / ``v_cache``
(pages, page_size, H_kv, D), ``page_table`` (B, pages per sequence) int32 and ``cache_seqlens`` (B,) int32.
The kernel (``forward.FlashAttentionPaged``) loads one page per K/V tile, so ``page_size`` must be the
kernel's tile (128 keys; 64 at head dim 256). Decode shapes split the keys (``split_kv``) as
``ops.attention`` does, from the table's capacity (no host sync for the lengths)."""
from __future__ import annotations


import cutlass
import cutlass.cute as cute

from .. import _host
from . import split_kv
from .forward import HEAD_DIMS, FlashAttentionPaged
from .host import (_partials, _splits_for, _tma_ready, gqa_packed, gqa_unpacked, softmax_scale, split_options,
                   tuned_options)
from .masks import AttentionConfigError, with_masks

_CACHE = {}
VERDICT_OF = {}


def paged_options(head_dim, causal=False):
    """``tuned_options``, with 64-key tiles at head dim 256: a page is one K/V tile, and the contiguous
    forward's 80-key tile there is not a page size K/V caches use."""
    options = tuned_options(head_dim, causal)
    if head_dim == 256:
        options["block_n"] = 64
    return options


def page_size_for(head_dim, causal=False):
    """The page size the kernel takes: its K/V tile (``paged_options``' block_n)."""
    return paged_options(head_dim, causal).get("block_n", 128)


def check_args(q, k_cache, v_cache, page_table, cache_seqlens, causal=False):
    """Shapes, dtypes and devices; every message names the fix (duck-typed: runs without a GPU)."""
    named = {"q": q, "k_cache": k_cache, "v_cache": v_cache, "page_table": page_table, "cache_seqlens": cache_seqlens}
    refusal = _host.non_tensor(named, ("shape", "dtype", "is_cuda"))
    if refusal:
        raise AttentionConfigError(refusal)
    for name, t in named.items():
        if not t.is_cuda:
            raise AttentionConfigError(f"{name} is on {t.device}; move it to the GPU")
    if len(q.shape) != 4:
        raise AttentionConfigError(f"q has shape {tuple(q.shape)}; expected (B, H, S_q, D), SDPA's layout")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if len(t.shape) != 4:
            raise AttentionConfigError(f"{name} has shape {tuple(t.shape)}; expected (pages, page_size, H_kv, D), "
                                       "flash_attn's paged cache layout")
    if not (str(q.dtype) == str(k_cache.dtype) == str(v_cache.dtype)) or str(q.dtype) not in (
            "torch.bfloat16", "torch.float16"):
        raise AttentionConfigError(f"q, k_cache, v_cache are {q.dtype}, {k_cache.dtype}, {v_cache.dtype}: use one of "
                                   "torch.bfloat16, torch.float16")
    if tuple(v_cache.shape) != tuple(k_cache.shape):
        raise AttentionConfigError(f"v_cache {tuple(v_cache.shape)} and k_cache {tuple(k_cache.shape)} must match")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if hasattr(t, "is_contiguous") and not t.is_contiguous():
            raise AttentionConfigError(f"{name} is not contiguous: the kernel reads the cache in place (no copy of "
                                       "it is made); allocate it as one (pages, page_size, H_kv, D) tensor")
    B, H, _, D = q.shape
    _, page, Hk, Dk = k_cache.shape
    if Dk != D or D not in HEAD_DIMS:
        raise AttentionConfigError(f"head dims q {D}, cache {Dk}: they must match and be one of {HEAD_DIMS}")
    if Hk < 1 or H % Hk:
        raise AttentionConfigError(f"{H} query heads over {Hk} key/value heads: the query heads must be a "
                                   "multiple of the key/value heads (grouped-query attention)")
    want = page_size_for(D, causal)
    if page != want:
        raise AttentionConfigError(f"page_size {page}: the kernel reads one page per K/V tile of {want} keys at head "
                                   f"dim {D}; allocate the cache with pages of {want}")
    if len(page_table.shape) != 2 or page_table.shape[0] != B or str(page_table.dtype) != "torch.int32":
        raise AttentionConfigError(f"page_table is {tuple(page_table.shape)} {page_table.dtype}: expected ({B}, pages "
                                   "per sequence) torch.int32, the cache page of each sequence's page_size keys")
    if tuple(cache_seqlens.shape) != (B,) or str(cache_seqlens.dtype) != "torch.int32":
        raise AttentionConfigError(f"cache_seqlens is {tuple(cache_seqlens.shape)} {cache_seqlens.dtype}: expected "
                                   f"({B},) torch.int32, the keys of each sequence")


def fake_operands(dtype, head_dim, split=False):
    """Fake q (B, H, S_q, D), the caches as (1, H_kv, pages x page, D), out / lse (the runs' fp32 partials
    with ``split``), the page table (B, P) and the cache lengths (B,)."""
    from cutlass.cute.runtime import make_fake_tensor

    B, H, Hk, Sq, T, P = (cute.sym_int32() for _ in range(6))
    q = _host.fake_bhsd(dtype, B, H, Sq, head_dim)
    k, v = (_host.fake_bhsd(dtype, 1, Hk, T, head_dim) for _ in range(2))
    Bo, out_dtype = (cute.sym_int32(), cutlass.Float32) if split else (B, dtype)
    pages = make_fake_tensor(cutlass.Int32, (B, P), (cute.sym_int64(), 1), assumed_align=4)
    lens = make_fake_tensor(cutlass.Int32, (B,), (1,), assumed_align=4)
    return (q, k, v, _host.fake_bhsd(out_dtype, Bo, H, Sq, head_dim), _host.fake_rows(Bo, H, Sq), pages, lens)


def compile_for_cpu(arch="sm_90a", dtype=cutlass.BFloat16, head_dim=128, causal=False, **options):
    """Compile the paged kernel for ``arch`` with fake operands (the CPU tests read its PTX)."""
    from cutlass.cute.runtime import make_fake_stream

    kern = FlashAttentionPaged(dtype=dtype, head_dim=head_dim, causal=causal, **options)
    return cute.compile(kern, *fake_operands(dtype, head_dim, kern.split_kv), cutlass.Float32(0.125),
                        make_fake_stream(), options=_host.ptx_options(arch))


def _compiled(key):
    if key not in _CACHE:
        dtype, head_dim, causal, options = key
        kern = FlashAttentionPaged(dtype=dtype, head_dim=head_dim, causal=causal,
                                   **{"max_ctas": _host.num_sms(), **dict(options)})
        _CACHE[key] = cute.compile(kern, *fake_operands(dtype, head_dim, kern.split_kv), cutlass.Float32(0.125),
                                   _host.fake_env_stream(), options=_host.ffi_options())
        _host.record_verdict(VERDICT_OF, key, kern)
    return _CACHE[key]


def attention_paged(q, k_cache, v_cache, page_table, cache_seqlens, causal=False, scale=None, num_splits=None,
                    return_lse=False, window_size=None, softcap=None, mask_mod=None, pack_gqa=None):
    """``warpsched.ops.attention_paged`` (TVM-FFI launches): out (B, H, S_q, D), with ``return_lse`` the
    (B, H, S_q) fp32 LSE. Split-KV as ``ops.attention``'s (``num_splits``), from the table's capacity;
    ``pack_gqa`` as ``attention.host.attention``'s (the cache is read once per K/V head's group)."""
    import torch

    if not _host.ffi_enabled():
        raise AttentionConfigError("attention_paged launches through TVM FFI: pip install apache-tvm-ffi "
                                   "(and leave WARPSCHED_TVM_FFI unset)")
    check_args(q, k_cache, v_cache, page_table, cache_seqlens, causal)
    B, H, Sq, D = q.shape
    pages, page, Hk, _ = k_cache.shape
    packed = gqa_packed(q, Hk, causal, mask_mod, window_size) if pack_gqa is not False else None
    if packed is not None:
        return gqa_unpacked(q, *attention_paged(packed, k_cache, v_cache, page_table, cache_seqlens, causal, scale,
                                                num_splits, True, window_size, softcap, mask_mod), return_lse)
    options = paged_options(D, causal)
    splits = _splits_for(q.shape, page_table.shape[1] * page, options, num_splits, False)  # the table's capacity
    if splits > 1:
        options = split_options(options)
    options = with_masks(options, window_size, softcap, mask_mod)
    key = (_host.cutlass_dtype(q.dtype), D, bool(causal), tuple(sorted(options.items())))
    scale = softmax_scale(D, scale)
    q = _tma_ready(q)
    k, v = (t.view(pages * page, Hk, D).permute(1, 0, 2).unsqueeze(0) for t in (k_cache, v_cache))
    out = torch.empty(B, H, Sq, D, device=q.device, dtype=q.dtype)
    lse = torch.empty(B, H, Sq, device=q.device, dtype=torch.float32)
    tables = (page_table if page_table.stride(1) == 1 else page_table.contiguous(), cache_seqlens.contiguous())
    if splits > 1:
        o_part, lse_part = _partials(q, splits)
        _compiled(key)(q, k, v, o_part, lse_part, *tables, scale)
        split_kv.combine(o_part, lse_part, out, lse)
    else:
        _compiled(key)(q, k, v, out, lse, *tables, scale)
    return (out, lse) if return_lse else out
