"""Try backward kernel options as if they were the defaults, across every benchmark that imports this
module: ``WS_BWD_DEFAULTS="dq_stages=2"`` adds options to what ``ops.attention_backward`` (and autograd)
run for dense batches, ``WS_BWD_VARLEN_DEFAULTS="tma_stats=1"`` to what the packed (varlen) kernel runs;
``WS_BWD_DEFAULTS_DIMS="128"`` limits both to those head dims (the others keep their defaults). Values are
integers (``1`` / ``0`` for flags). A candidate is adopted as a default only after the
correctness, deterministic, mask and varlen checks have run with it this way."""
from __future__ import annotations

import inspect
import os

from warpsched.kernels.attention import backward_host as _bwd_host


def parse_options(text):
    """"a=1,b=2" -> {a: True, b: 2}: an option whose default is a flag (FlashAttentionBackward's signature, or the
    packed call's host flags such as ``zero_in_prep``) becomes a bool, a count stays an int."""
    from warpsched.kernels.attention.backward import FlashAttentionBackward

    defaults = inspect.signature(FlashAttentionBackward.__init__).parameters
    flags = ({n for n, p in defaults.items() if isinstance(p.default, bool)}
             | {n for n, x in _bwd_host.default_options(128, varlen=True).items() if isinstance(x, bool)})
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, _, value = item.partition("=")
        out[name] = bool(int(value)) if name in flags else int(value)
    return out


DENSE = parse_options(os.environ.get("WS_BWD_DEFAULTS", ""))
PACKED = parse_options(os.environ.get("WS_BWD_VARLEN_DEFAULTS", ""))
DIMS = {int(d) for d in os.environ.get("WS_BWD_DEFAULTS_DIMS", "").split(",") if d.strip()}
if DENSE or PACKED:
    _stock = _bwd_host.default_options

    def _trial(head_dim, varlen=False, full=False, deterministic=False):
        if DIMS and head_dim not in DIMS:
            return _stock(head_dim, varlen, full, deterministic)
        return dict(_stock(head_dim, varlen, full, deterministic), **(PACKED if varlen else DENSE))

    _bwd_host.default_options = _trial
    print(f"# backward defaults on trial: dense {_trial(128)} (hd128), packed {_trial(128, True)}", flush=True)
