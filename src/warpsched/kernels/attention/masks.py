"""What the attention forward does to a score tile besides the causal / tail mask: a sliding window, a
user's ``mask_mod`` and a ``softcap`` (as FlashAttention's and flex attention's).

- ``window_size=(left, right)``: query i sees keys i - left .. i + right (``window_bounds``). Unlike a
  ``mask_mod``, the window also bounds the K/V tiles a unit visits (``units.kv_first_tile`` /
  ``kv_tiles_of``), so the work is the window's, not the sequence's; only the tiles its edges cross are
  masked (``register_math.mask_tile``).

- ``mask_mod(batch, head, q_idx, kv_idx)``: True where query ``q_idx`` of (batch, head) may attend to
  key ``kv_idx``. It is traced into the kernel: it receives the kernel's Int32 values and must combine
  comparisons with ``&``, ``|`` and ``~`` (not ``and`` / ``or`` / ``not``, which would ask a runtime
  value for a Python bool), e.g. a sliding window of 256 keys: ``lambda b, h, q, kv: (kv <= q) &
  (q - kv < 256)``. It is applied to every score of every K/V tile the unit visits (all of them, or
  up to the diagonal with ``causal``), after the tail mask; a row it masks entirely gets O = 0 and an
  LSE of +inf. The compiled kernel is cached per function object: pass the same function again.
- ``softcap``: scores s (already times the softmax scale) become softcap * tanh(s / softcap) before
  the masks.

None of them changes the synchronization: the kernel's program, and so its proof, is the one
without them (the window changes which tile a step loads, and how many steps: every count >= 1 is
proven). The backward takes them too (``attention.backward``, docs/attention.md "Masks in the backward")."""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

from .register_math import s_tile_coords



class AttentionConfigError(ValueError):
    """An unsupported head dim / dtype / tile / mask, or tensors the kernel cannot take (host side)."""


def check(mask_mod, softcap, unit_overlap):
    """Refuse what the kernel cannot apply, naming the fix."""
    if mask_mod is not None and not callable(mask_mod):
        raise AttentionConfigError(f"mask_mod={mask_mod!r}: expected a function (batch, head, q_idx, kv_idx) -> "
                                   "bool, e.g. lambda b, h, q, kv: (kv <= q) & (q - kv < 256)")
    if softcap is not None and not (isinstance(softcap, (int, float)) and not isinstance(softcap, bool)
                                    and softcap > 0):
        raise AttentionConfigError(f"softcap={softcap!r}: expected a positive number (e.g. 50.0), or None")
    if unit_overlap and (mask_mod is not None or softcap is not None):
        raise AttentionConfigError("mask_mod / softcap with unit_overlap=True: the one-tile-ahead S GEMM does not "
                                   "apply them; leave unit_overlap off (the default)")


def window_bounds(window_size, causal, unit_overlap):
    """``window_size=(left, right)`` -> (window_left, window_right): query i sees keys i - left .. i + right
    (None or -1: no bound on that side; as flash_attn's ``window_size``, from the diagonal ``causal``
    uses: top-left aligned). ``causal`` is right = 0. Refuses what the kernel cannot take, naming the fix."""
    if window_size is None:
        return None, None
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise AttentionConfigError(f"window_size={window_size!r}: expected (left, right), e.g. (255, 0) for 256 "
                                   "keys up to the query; None or -1 leaves a side unbounded") from None

    def bound(x, side):
        if x is None or (isinstance(x, int) and not isinstance(x, bool) and x == -1):
            return None
        if not isinstance(x, int) or isinstance(x, bool) or x < 0:
            raise AttentionConfigError(f"window_size={window_size!r}: the {side} bound {x!r} is not a key count >= 0 "
                                       "(or -1 / None for no bound)")
        return x
    left, right = bound(left, "left"), bound(right, "right")
    if causal:
        if right not in (None, 0):
            raise AttentionConfigError(f"window_size={window_size!r} with causal=True: causal already ends the "
                                       "window at the query; pass window_size=(left, 0) or causal=False")
        right = 0
        if left is None:
            return None, None  # causal alone
    if unit_overlap and (left is not None or right is not None):
        raise AttentionConfigError("window_size with unit_overlap=True: the one-tile-ahead S GEMM does not start "
                                   "at the window's first tile; leave unit_overlap off (the default)")
    return left, right


@cute.jit
def softcap_tile(acc_s, scale: cutlass.Float32, softcap: cutlass.Constexpr):
    """S (unscaled) -> softcap * tanh(S * scale / softcap) / scale, so that the softmax's S * scale is
    the capped score."""
    inner = scale / softcap
    outer = softcap / scale
    for i in cutlass.range_constexpr(cute.size(acc_s)):
        acc_s[i] = outer * cute.math.tanh(acc_s[i] * inner, fastmath=True)


@cute.jit
def mask_mod_tile(acc_s, qk_mma, row0, col0, block_n: cutlass.Constexpr, mask_mod: cutlass.Constexpr, batch, head):
    """-inf where ``mask_mod(batch, head, row0 + row, col0 + column)`` is False, for every score of the
    tile this thread holds."""
    tidx, _, _ = cute.arch.thread_idx()
    coords = s_tile_coords(qk_mma, block_n, tidx % 128)
    for i in cutlass.range_constexpr(cute.size(acc_s)):
        keep = mask_mod(batch, head, row0 + coords[i][0], col0 + coords[i][1])
        if not keep:
            acc_s[i] = -cutlass.Float32.inf


def with_masks(options, window_size=None, softcap=None, mask_mod=None):
    """``options`` with the masks a caller gave added (the kernel validates them); a list window becomes a
    tuple, so the options stay a hashable compile key."""
    extra = {"window_size": None if window_size is None else tuple(window_size), "softcap": softcap,
             "mask_mod": mask_mod}
    return dict(options, **{name: value for name, value in extra.items() if value is not None})

