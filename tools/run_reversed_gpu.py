"""Issue 30 on the GPU: a kernel with a reversed loop, checked and run; its wrong twin hangs.

  python3 tools/run_reversed_gpu.py 2>&1 | tee bench/results/reversed.log

examples/hopper/reversed_copy.py: the producer loops ``range(stride * n - 1, -1, -stride)``
(counting down, guards every(3, start=1) / first_iter / last_iter), the consumer loops
``range(n)`` (every(2, start=1) / last_iter). For each size: the program's verdict (the check the
kernel's trace runs), fresh random inputs drawn twice, every output poisoned with NaN first,
compared with a float64 host reference. The wrong twin (issue 30's program: 3 commits, 2 waits) is
first shown rejected, then compiled with skip_validation=True and launched in a child process
under a watchdog: the producer's end-of-kernel drain waits for a stage no one releases.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "hopper"))
sys.path.insert(0, os.environ.get("WARPSCHED_SRC", os.path.join(ROOT, "src")))

WATCHDOG_S = 25


def _verdict(**kw):
    import reversed_copy as ex
    from warpsched import ValidationError

    try:
        mgr = ex.build(verbose=False, **kw)
    except ValidationError as e:
        first = next(f for f in e.findings if f.severity == "error")
        counts = [ln for ln in (first.detail or "").splitlines() if ln.startswith("trip counts")]
        return f"REJECTED [{first.check}] {first.message[:90]}... {counts[0] if counts else ''}"
    chk = mgr.result.checker
    return f"ACCEPTED: checker {chk.verdict}, {chk.states} states; {chk.loop_note}"


def run_right():
    import torch

    import reversed_copy as ex

    print("verdict (runtime n):", _verdict(), flush=True)
    print("verdict (n = 7, stride 3):", _verdict(n=7, stride=3), flush=True)
    bad = 0
    cases = [(n, 0, 1) for n in (1, 2, 3, 5, 9, 64, 1000)] + [(7, 7, 3), (6, 6, 2), (5, 5, 1)]
    for n, n_static, stride in cases:
        for draw in range(2):
            x = torch.randn(n, ex.WIDTH, device="cuda", dtype=torch.float32)
            y = torch.full_like(x, float("nan"))  # every element written
            z, w = torch.zeros_like(x), torch.zeros_like(x)  # marks: written on some rows only, 0 elsewhere
            ex.run(x, y, z, w, n_static=n_static, stride=stride)
            torch.cuda.synchronize()
            ry, rz, rw = ex.reference(x.cpu())
            err = ((y.double().cpu() - ry).norm() / ry.norm()).item()
            ok = bool(torch.isfinite(y).all()) and err < 1e-6 and torch.equal(z.double().cpu(), rz) \
                and torch.equal(w.double().cpu(), rw)
            bad += not ok
            print(f"  n={n:<5} {'static' if n_static else 'runtime'} stride={stride} draw {draw}: "
                  f"{'OK ' if ok else 'BAD'} rel err y {err:.1e}, z {'exact' if torch.equal(z.double().cpu(), rz) else 'WRONG'}"
                  f", w {'exact' if torch.equal(w.double().cpu(), rw) else 'WRONG'}", flush=True)
    return bad


def run_wrong_child():
    """Launch the wrong twin (checking turned off) and wait for it: never returns if it hangs."""
    import torch

    import reversed_copy as ex

    n = ex.WRONG_ROWS
    x = torch.randn(n, ex.WIDTH, device="cuda")
    y, z, w = (torch.zeros_like(x) for _ in range(3))
    ex.run(x, y, z, w, n_static=n, variant="wrong")
    torch.cuda.synchronize()
    print("WRONG TWIN FINISHED", flush=True)


def run_wrong():
    print("verdict (wrong twin):", _verdict(n=5, variant="wrong"), flush=True)
    t0 = time.time()
    p = subprocess.Popen([sys.executable, __file__, "--wrong-child"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    try:
        out, _ = p.communicate(timeout=WATCHDOG_S)
        hung = False
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        hung = True
    tail = " | ".join(out.strip().splitlines()[-3:])
    print(f"wrong twin on the GPU: {'HUNG, killed by the watchdog' if hung else 'returned'} after "
          f"{time.time() - t0:.1f} s (watchdog {WATCHDOG_S} s); child output: {tail[:300]}", flush=True)
    return hung


if __name__ == "__main__":
    if "--wrong-child" in sys.argv:
        run_wrong_child()
        sys.exit(0)
    bad = run_right()
    hung = run_wrong()
    print(f"SUMMARY: right kernel {'all correct' if not bad else f'{bad} BAD case(s)'}; "
          f"wrong twin {'hangs (as its counterexample says)' if hung else 'did NOT hang'}")
    sys.exit(0 if (not bad and hung) else 1)
