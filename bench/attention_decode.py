"""H200: warpsched's attention forward at decode shapes (a few query rows over a long K/V) with split-KV
(``ops.attention(num_splits=None)`` splits by itself; kernels/attention/split_kv.py): correctness against
an fp64 reference, then time against FlashAttention-4 (which has no split-KV on Hopper), torch SDPA's
cuDNN and flash backends, and warpsched without splits; then the paged K/V cache (``ops.attention_paged``):
correctness against fp64 and time against FlashAttention-4's paged forward.

    python3 bench/attention_decode.py [--rounds 3] [--no-time]

Correctness: fresh random inputs per case, O and the LSE poisoned with NaN, fp64 reference; O's max error
relative to max |ref| (bar 8e-3: the bf16 rounding of O, twice that for fp16's range) and the LSE's max abs
error (bar 1e-2), with automatic and explicit split counts, GQA / MQA, ragged S_k, hd 64 / 128 / 256, fp16,
causal (top-left), a bottom-right causal window, softcap and a mask_mod. Time: device time (CUDA graphs of
back-to-back launches, triton's do_bench median, sides alternating in rounds) and eager time (host
included, ``_eager.alternate``); the K/V bytes read per microsecond say how near the bandwidth it runs.
"""
from __future__ import annotations

import math
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from _eager import alternate, check_then_time, fa4  # noqa: E402
from _graphs import graph_ms  # noqa: E402
from attention_mask_check import reference as masked_reference  # noqa: E402
from warpsched import ops  # noqa: E402
from warpsched.kernels.attention import host, split_kv  # noqa: E402


def sink_or_recent(b, h, q, kv):  # attention sinks: the first 4 keys and the last 3000
    return (kv < 4) | (kv > 97000 - 3000)


CASES = [  # name, B, H, Hk, Sq, Sk, D, dtype, causal, window, softcap, mask_mod, num_splits
    ("decode GQA", 1, 32, 8, 1, 8192, 128, torch.bfloat16, False, None, None, None, None),
    ("16 rows, ragged S_k", 2, 32, 8, 16, 32768 + 77, 128, torch.bfloat16, False, None, None, None, None),
    ("MQA, 100k keys", 1, 8, 1, 3, 100000, 128, torch.bfloat16, False, None, None, None, None),
    ("hd64 fp16", 4, 16, 16, 1, 4000, 64, torch.float16, False, None, None, None, None),
    ("hd256", 1, 8, 8, 1, 8192 + 5, 256, torch.bfloat16, False, None, None, None, None),
    ("explicit 7 runs", 2, 4, 2, 100, 3001, 64, torch.bfloat16, False, None, None, None, 7),
    ("more runs than tiles", 1, 4, 4, 2, 700, 128, torch.bfloat16, False, None, None, None, 64),
    ("causal (top-left)", 1, 8, 2, 1024, 1024, 128, torch.bfloat16, True, None, None, None, None),
    ("bottom-right causal window", 2, 16, 4, 16, 20000, 128, torch.bfloat16, False, (-1, 20000 - 16), None, None, None),
    ("softcap 30", 1, 16, 4, 4, 16384, 128, torch.bfloat16, False, None, 30.0, None, None),
    ("sinks mask_mod", 1, 8, 8, 1, 97000, 128, torch.bfloat16, False, None, None, sink_or_recent, None),
    ("no split (8x32 rows)", 8, 32, 8, 1, 8192, 128, torch.bfloat16, False, None, None, None, None),
]


def reference(q, k, v, causal, window, softcap, mask_mod, scale):
    """fp64 O and LSE (``attention_mask_check.reference``: the mask evaluated on index tensors)."""
    out, lse, _ = masked_reference(q, k, v, mask_mod, causal, softcap, scale, window)
    return out, lse


PAGED = [  # name, B, H, Hk, Sq, lengths, D, causal, num_splits
    ("paged, GQA", 4, 32, 8, 1, [8192, 100, 3000, 1], 128, False, None),
    ("paged, an empty sequence", 3, 8, 8, 4, [0, 2000, 129], 64, False, None),
    ("paged, hd256 (64-key pages)", 2, 8, 2, 1, [5000, 777], 256, False, None),
    ("paged, no split", 2, 16, 4, 16, [1000, 4000], 128, False, 1),
    ("paged, causal", 2, 8, 8, 300, [300, 1000], 128, True, None),
]


def paged_inputs(B, H, Hk, Sq, lengths, D, page, dtype=torch.bfloat16, seed=0):
    """A dense K / V (B, Hk, max_len, D) and the same keys in a shuffled paged cache with its table."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    per_seq = max(1, -(-max(lengths) // page))
    q = torch.randn(B, H, Sq, D, device="cuda", dtype=dtype, generator=g)
    k, v = (torch.randn(B, Hk, per_seq * page, D, device="cuda", dtype=dtype, generator=g) for _ in range(2))
    order = torch.randperm(B * per_seq + 3, device="cuda", generator=g)[:B * per_seq].to(torch.int32)
    table = order.view(B, per_seq).contiguous()
    k_cache, v_cache = (torch.randn(B * per_seq + 3, page, Hk, D, device="cuda", dtype=dtype, generator=g)
                        for _ in range(2))
    for cache, dense in ((k_cache, k), (v_cache, v)):
        cache[table.flatten().long()] = dense.view(B, Hk, per_seq, page, D).permute(0, 2, 3, 1, 4).reshape(
            B * per_seq, page, Hk, D)
    lens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    return q, k, v, k_cache, v_cache, table, lens


def paged_correctness():
    from warpsched.kernels.attention.paged import page_size_for

    bad = 0
    print("\n| paged case | B x H/Hk x Sq | cache lengths | D | O err | LSE max abs err | result |")
    print("|---|---|---|---|---|---|---|")
    for name, B, H, Hk, Sq, lengths, D, causal, num_splits in PAGED:
        q, k, v, k_cache, v_cache, table, lens = paged_inputs(B, H, Hk, Sq, lengths, D, page_size_for(D, causal))
        out, lse = ops.attention_paged(q, k_cache, v_cache, table, lens, causal=causal, num_splits=num_splits,
                                       return_lse=True, pack_gqa=False)
        packed = None
        if host.gqa_packed(q, Hk, causal) is not None:  # the default packs it: the cache read once per group
            packed = ops.attention_paged(q, k_cache, v_cache, table, lens, num_splits=num_splits, return_lse=True)
        ref = torch.empty(B, H, Sq, D, device="cuda", dtype=torch.float64)
        ref_lse = torch.empty(B, H, Sq, device="cuda", dtype=torch.float64)
        for b, n in enumerate(lengths):
            o_b, l_b = reference(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n], causal, None, None, None,
                                 1 / math.sqrt(D))
            ref[b], ref_lse[b] = o_b[0], l_b[0]
        seen = torch.isfinite(ref_lse)
        err = ((out.double() - ref.nan_to_num(0.0)).abs().max() / ref.nan_to_num(0.0).abs().max()).item()
        lse_err = (lse.double() - ref_lse)[seen].abs().max().item()
        empty_ok = bool((out[~seen] == 0).all()) and bool((lse[~seen] == float("inf")).all())
        ok = err < 8e-3 and lse_err < 1e-2 and empty_ok and not out.isnan().any()
        note = ""
        if packed is not None:  # bitwise the unpacked result is not promised (other split counts): fp64 again
            err_p = ((packed[0].double() - ref.nan_to_num(0.0)).abs().max() / ref.nan_to_num(0.0).abs().max()).item()
            ok = ok and err_p < 8e-3 and not packed[0].isnan().any()
            ok = ok and bool((packed[1][~seen] == float("inf")).all())
            note = f" (packed {err_p:.2e})"
        bad += not ok
        print(f"| {name} | {B}x{H}/{Hk}x{Sq} | {lengths} | {D} | {err:.2e}{note} | {lse_err:.1e} | "
              f"{'PASS' if ok else 'FAIL'} |", flush=True)
    print(f"paged correctness: {len(PAGED) - bad}/{len(PAGED)} PASS", flush=True)
    return bad


def _sms():
    return torch.cuda.get_device_properties(0).multi_processor_count


def correctness():
    bad = 0
    print("| case | B x H/Hk x Sq x Sk | D | dtype | runs | O err | LSE max abs err | result |")
    print("|---|---|---|---|---|---|---|---|")
    for name, B, H, Hk, Sq, Sk, D, dtype, causal, window, softcap, mask_mod, num_splits in CASES:
        q = torch.randn(B, H, Sq, D, device="cuda", dtype=dtype)
        k = torch.randn(B, Hk, Sk, D, device="cuda", dtype=dtype)
        v = torch.randn(B, Hk, Sk, D, device="cuda", dtype=dtype)
        out = torch.full_like(q, float("nan"))
        lse = torch.full((B, H, Sq), float("nan"), device="cuda")
        ops.attention(q, k, v, causal=causal, out=out, lse=lse, window_size=window, softcap=softcap,
                      mask_mod=mask_mod, num_splits=num_splits, pack_gqa=False)
        packs = host.gqa_packed(q, Hk, causal, mask_mod, window) is not None
        if packs:  # the default packs it (the same call as the K/V heads), into its own poisoned outputs
            out_p, lse_p = torch.full_like(q, float("nan")), torch.full((B, H, Sq), float("nan"), device="cuda")
            ops.attention(q, k, v, out=out_p, lse=lse_p, softcap=softcap, num_splits=num_splits)
        block_n = 64 if D == 256 else 128
        runs = (split_kv.check_splits(num_splits, Sk, block_n) if num_splits is not None else
                split_kv.choose_splits(B, H, Sq, Sk, 192 if D == 64 and not causal else 128, block_n, _sms()))
        ref, ref_lse = reference(q, k, v, causal, window, softcap, mask_mod, 1 / math.sqrt(D))
        err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
        lse_err = (lse.double() - ref_lse).abs().max().item()
        ok = err < (8e-3 if dtype == torch.bfloat16 else 4e-3) and lse_err < 1e-2 and not out.isnan().any()
        if packs:
            err_p = ((out_p.double() - ref).abs().max() / ref.abs().max()).item()
            lse_err_p = (lse_p.double() - ref_lse).abs().max().item()
            ok = ok and err_p < (8e-3 if dtype == torch.bfloat16 else 4e-3) and lse_err_p < 1e-2
            ok = ok and not out_p.isnan().any()
            err, lse_err = f"{err:.2e} (packed {err_p:.2e})", f"{lse_err:.1e} (packed {lse_err_p:.1e})"
        else:
            err, lse_err = f"{err:.2e}", f"{lse_err:.1e}"
        bad += not ok
        print(f"| {name} | {B}x{H}/{Hk}x{Sq}x{Sk} | {D} | {str(dtype)[6:]} | {runs} | {err} | {lse_err} | "
              f"{'PASS' if ok else 'FAIL'} |", flush=True)
    print(f"correctness: {len(CASES) - bad}/{len(CASES)} PASS", flush=True)
    return bad + paged_correctness()


SHAPES = [  # B, H, Hk, Sq, Sk, D
    (1, 32, 8, 1, 8192, 128), (1, 32, 8, 1, 32768, 128), (1, 32, 8, 16, 32768, 128), (4, 32, 8, 4, 16384, 128),
    (8, 32, 8, 1, 8192, 128), (1, 8, 1, 1, 131072, 128), (2, 16, 16, 1, 4096, 64), (1, 16, 16, 1, 16384, 256),
]


def _sdpa(backend, q, k, v):
    from torch.nn.attention import sdpa_kernel

    def run():
        with sdpa_kernel([backend]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=q.shape[1] != k.shape[1])
    try:
        run()
        return run
    except Exception as e:  # noqa: BLE001 - a backend that refuses the shape is left out of the row
        print(f"  ({backend.name} refuses {tuple(q.shape)} x {tuple(k.shape)}: {type(e).__name__})", flush=True)
        return None


def speed(rounds):
    from torch.nn.attention import SDPBackend
    from triton.testing import do_bench

    flash_attn_func = fa4("flash_attn_func")
    names = ["ws", "ws_nopack", "ws_nosplit", "fa4", "cudnn", "flash"]
    for mode in ("device (CUDA graphs)", "eager (host included)"):
        print(f"\n{mode}, us per call; K/V GB/s for warpsched")
        print("| B x H/Hk x Sq x Sk | D | runs | warpsched | pack_gqa=False | no split | FA4 | cuDNN | flash | "
              "ws GB/s | FA4 / ws | cuDNN / ws | flash / ws | no split / ws | no pack / ws |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for B, H, Hk, Sq, Sk, D in SHAPES:
            q, k, v = (torch.randn(B, s, h, D, device="cuda", dtype=torch.bfloat16)
                       for s, h in ((Sq, H), (Sk, Hk), (Sk, Hk)))
            qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, S, D) views of the same data
            sides = {"ws": lambda: ops.attention(qt, kt, vt),
                     "ws_nosplit": lambda: ops.attention(qt, kt, vt, num_splits=1)}
            if host.gqa_packed(qt, Hk) is not None:  # the default packs it: the unpacked run beside it
                sides["ws_nopack"] = lambda: ops.attention(qt, kt, vt, pack_gqa=False)
            if flash_attn_func is not None:
                sides["fa4"] = lambda: flash_attn_func(q, k, v)
            for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
                fn = _sdpa(backend, qt, kt, vt)
                if fn is not None:
                    sides[name] = fn
            runs = split_kv.choose_splits(B, H, Sq, Sk, 192 if D == 64 else 128, 64 if D == 256 else 128, _sms())
            if mode.startswith("device"):
                times = {n: [] for n in sides}
                for _ in range(rounds):
                    for n, fn in sides.items():
                        times[n].append(graph_ms(torch, do_bench, fn, 0.05, 100))
                us = {n: statistics.median(t) * 1e3 for n, t in times.items()}
            else:
                us = {n: ms * 1e3 for n, ms in alternate(torch, sides, rounds=rounds, iters=50).items()}
            gbs = 2 * B * Hk * Sk * D * 2 / (us["ws"] * 1e-6) / 1e9  # K and V once (the unpacked run reads more)
            cells = [f"{us.get(n, float('nan')):.1f}" for n in names]
            ratios = [f"{us.get(n, float('nan')) / us['ws']:.2f}x"
                      for n in ("fa4", "cudnn", "flash", "ws_nosplit", "ws_nopack")]
            print(f"| {B}x{H}/{Hk}x{Sq}x{Sk} | {D} | {runs} | " + " | ".join(cells) + f" | {gbs:.0f} | "
                  + " | ".join(ratios) + " |", flush=True)


PAGED_SPEED = [(1, 32, 8, 1, 32768, 128), (8, 32, 8, 1, 8192, 128), (4, 32, 8, 4, 16384, 128)]


def paged_speed(rounds):
    """Device time of the paged forward (uniform cache lengths) against FA4's paged forward and against
    warpsched on the same keys contiguous."""
    from triton.testing import do_bench

    flash_attn_varlen_func = fa4("flash_attn_varlen_func")
    print("\npaged K/V cache (128-key pages), device time (CUDA graphs), us")
    print("| B x H/Hk x Sq x S_k | D | warpsched paged | paged pack_gqa=False | warpsched contiguous | FA4 paged | "
          "FA4 / ws paged | no pack / paged | contiguous / paged |")
    print("|---|---|---|---|---|---|---|---|---|")
    for B, H, Hk, Sq, Sk, D in PAGED_SPEED:
        q, k, v, k_cache, v_cache, table, lens = paged_inputs(B, H, Hk, Sq, [Sk] * B, D, 128)
        sides = {"paged": lambda: ops.attention_paged(q, k_cache, v_cache, table, lens),
                 "paged_nopack": lambda: ops.attention_paged(q, k_cache, v_cache, table, lens, pack_gqa=False),
                 "contiguous": lambda: ops.attention(q, k, v)}
        if flash_attn_varlen_func is not None:
            qf = q.transpose(1, 2).contiguous()

            def fa4_paged():
                return flash_attn_varlen_func(qf, k_cache, v_cache, page_table=table, seqused_k=lens)
            try:
                fa4_paged()
                sides["fa4"] = fa4_paged
            except Exception as e:  # noqa: BLE001 - FA4 may refuse a paged shape
                print(f"  (FA4 paged: {type(e).__name__}: {str(e)[:120]})", flush=True)
        times = {n: [] for n in sides}
        for _ in range(rounds):
            for n, fn in sides.items():
                times[n].append(graph_ms(torch, do_bench, fn, 0.05, 100))
        us = {n: statistics.median(t) * 1e3 for n, t in times.items()}
        fa = us.get('fa4', float('nan'))
        print(f"| {B}x{H}/{Hk}x{Sq}x{Sk} | {D} | {us['paged']:.1f} | {us['paged_nopack']:.1f} | {us['contiguous']:.1f} | "
              f"{fa:.1f} | {fa / us['paged']:.2f}x | {us['paged_nopack'] / us['paged']:.2f}x | "
              f"{us['contiguous'] / us['paged']:.2f}x |", flush=True)


def all_speed(rounds):
    speed(rounds)
    paged_speed(rounds)


if __name__ == "__main__":
    check_then_time(__doc__, correctness, all_speed)
