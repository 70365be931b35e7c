"""Split-KV for the attention forward (``FlashAttention(split_kv=True)``): when a launch has fewer Q
blocks than the GPU has SMs (decode: a few query rows over a long K/V), each block's K/V tiles are cut
into runs, one work unit each (``units.WorkUnits``), every run writes its rows' O / sum and LSE in
fp32, and ``combine`` merges them: LSE = log sum_s exp(LSE_s), O = sum_s exp(LSE_s - LSE) O_s.

How many runs (``choose_splits``) follows flash-attention's rule: none for 4 K/V tiles or fewer, else
as many as fill the SMs with the launch's Q blocks, at most one per K/V tile and 128 in all."""
from __future__ import annotations

MAX_SPLITS = 128


def choose_splits(batch, heads, seqlen_q, seqlen_k, block_m, block_n, sms):
    """The K/V runs per Q block ``ops.attention`` takes by itself: 1 (no split) unless the launch's
    Q blocks leave SMs idle and every run gets at least one of more than 4 K/V tiles. The count is
    then trimmed so that no run is empty (``ceil(tiles / ceil(tiles / splits))``)."""
    tiles = -(-seqlen_k // block_n)
    blocks = batch * heads * -(-seqlen_q // block_m)
    if tiles <= 4 or blocks == 0:
        return 1
    splits = max(1, min(sms // blocks, MAX_SPLITS, tiles))
    per = -(-tiles // splits)
    return -(-tiles // per)


def check_splits(num_splits, seqlen_k, block_n):
    """``num_splits`` as a caller passed it: None (choose), or an int in [1, 128]; the message names the fix."""
    from .masks import AttentionConfigError

    if num_splits is None:
        return None
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or not 1 <= num_splits <= MAX_SPLITS:
        raise AttentionConfigError(f"num_splits={num_splits!r}: expected an int from 1 to {MAX_SPLITS} "
                                   "(or None: chosen from the shape)")
    tiles = -(-seqlen_k // block_n)
    per = -(-tiles // num_splits)
    return -(-tiles // per)  # runs past the last K/V tile would only be masked


def combine(o_part, lse_part, out, lse):
    """Merge the runs' fp32 partials ``o_part`` (splits * B, H, S_q, D) and ``lse_part`` (splits * B, H,
    S_q) into ``out`` (B, H, S_q, D) and ``lse`` (B, H, S_q). A run whose rows saw no key (LSE +inf, the
    kernel's mark for it) has no weight; a row no run saw gets O = 0 and LSE = +inf, as an unsplit launch."""
    import torch

    B = out.shape[0]
    splits = o_part.shape[0] // B
    lp = lse_part.view(splits, B, *lse_part.shape[1:]).nan_to_num(posinf=float("-inf"))
    top = lp.amax(0).nan_to_num_(neginf=0.0)  # a row no run saw: 0, its weights exp(-inf) = 0
    w = torch.exp(lp - top)
    total = w.sum(0)
    o = torch.einsum("sbhq,sbhqd->bhqd", w, o_part.view(splits, *out.shape))
    out.copy_(o / total.clamp_min(torch.finfo(torch.float32).tiny).unsqueeze(-1))
    lse.copy_(torch.where(total > 0, top + torch.log(total), float("inf")))
