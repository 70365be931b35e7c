"""The planted-bug table: for every bug class the checker names, a real Hopper kernel that has it and
its fixed twin.

Each kernel is an existing warpsched Hopper program (examples/hopper/, or a small one here) with a few
single-line edits. The *fixed twin* is the unedited program; the *bug* applies ``bug`` edits on top.
``common`` edits (a busy-wait in one role, for races that rarely open by themselves) apply to both, so
the twin shows the delay alone does not break a correct program. Edits never change the line count,
so every file:line the checker reports on an edited program is a line of the base file.

An edit is (scope, old, new): ``old`` is replaced on the first line containing it at or after the
first line containing ``scope`` (a ``def`` or ``class`` line; an int is a line number). All edits of
a variant are located on the unedited file, then applied. An edit that no longer finds its text
stops the run instead of planting something else.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOPPER = "examples/hopper"
PLANTED = "tools/planted"
RELU = f"{HOPPER}/relu_pipeline.py"
ICOPY = f"{HOPPER}/interleaved_copy.py"
TMACOPY = f"{HOPPER}/tma_copy.py"
WGMMA = f"{HOPPER}/wgmma_gemm.py"
SPLIT = f"{HOPPER}/patterns/split_consumer.py"
ALIAS = f"{PLANTED}/alias_race.py"
SKIP = f"{PLANTED}/skipped_tile.py"

DELAY_IMPORT = "from planted_delay import planted_delay  # planted: a busy-wait in one role\n"


@dataclass
class Run:
    label: str
    kwargs: dict = field(default_factory=dict)
    launches: int = 1  # a race gets many launches (fresh inputs each time)


@dataclass
class Case:
    key: str
    bug_class: str  # the wording
    base: str  # path relative to the repository root
    what: str  # the planted edit, in words
    bug: List[Tuple[int, str, str]]
    launcher: str  # name of a launcher in LAUNCHERS
    runs: List[Run]
    common: List[Tuple[int, str, str]] = field(default_factory=list)
    cpu_build: Tuple[str, dict] = ("build", {})
    delay: str = ""  # what the common edits do, for the table
    lowering_patch: Optional[str] = None  # a lowering change applied to the bug variant only
    sanitize: bool = False  # run compute-sanitizer on both variants
    note: str = ""


def _swap(scope: str, text_a: str, text_b: str):
    """Two edits exchanging the statements on two lines of one block (the same indentation)."""
    return [(scope, text_a, text_b), (scope, text_b, text_a)]


PRODUCER, CONSUMER = "def producer_schedule(", "def consumer_schedule("
RELU_CFG = "cfg = PipelineConfig.create_async_async_pipeline_cfg("

CASES: List[Case] = [
    Case("missing_commit", "missing commit", RELU, "ProducerTask's buf.commit() deleted",
         [(PRODUCER, "buf.commit()", "pass")], "relu", [Run("n=8", dict(n=8))]),
    Case("extra_wait", "consumer waiting more than produced", RELU,
         "ConsumerTask waits on buf once more after its loop",
         [(CONSUMER, "    launch.launch_griddep()", "    buf.wait(); launch.launch_griddep()")], "relu",
         [Run("n=8", dict(n=8))]),
    Case("arrival_count", "wrong arrival count (cooperative-group size)", RELU,
         "consumer_group=threads(32) for the 2-warp ConsumerTask (64 arrivals per release)",
         [(RELU_CFG, "consumer_group=threads(2 * 32)", "consumer_group=threads(32)")], "relu",
         [Run("n=8, 200 launches", dict(n=8), launches=200)],
         common=[("    def read(self, stage_info", "return self._smem()", "planted_delay(warp=3); return self._smem()")],
         delay="ConsumerTask's second warp (warp 3) spins ~10 us before each read", sanitize=True),
    Case("num_bytes", "wrong num_bytes", TMACOPY, "num_bytes = tile bytes + 256 (the TMA loads deliver the tile)",
         [("def build(", "num_bytes=tile_bytes,", "num_bytes=tile_bytes + 256,")], "tma_copy",
         [Run("bf16 256x512", dict(shape=(256, 512)))]),
    Case("lane_collision", "lane collision from a wrong interleave stride", ICOPY,
         "domain-lane config interleave_stride=(1, 1, 1, 1): both sibling consumer lanes walk every stage",
         [("def build(", "else (1, 1, 2, 2))", "else (1, 1, 1, 1))")], "icopy",
         [Run("n=16, 100 launches", dict(n=16, mode="domain"), launches=100)],
         cpu_build=("build", {"mode": "domain"})),
    Case("phase_after_stages", "phase error that appears only after num_stages iterations", RELU,
         "advance_on_wait consumer that releases both stages only after its loop (right while n <= 2 stages)",
         [(RELU_CFG, "SignalingThreads.TaskWarpLeader)", "SignalingThreads.TaskWarpLeader, advance_on_wait=True)"),
          (CONSUMER, "        buf.release()", "        pass"),
          (CONSUMER, "    launch.launch_griddep()", "    buf.release(); buf.release(); launch.launch_griddep()")],
         "relu", [Run("n=2 (= num_stages)", dict(n=2)), Run("n=8", dict(n=8))]),
    Case("smem_alias", "SMEM aliasing race", ALIAS,
         "the scratch row (aliasing the stage's bytes) is read after tile.release()",
         _swap("def reader_schedule(", "        b = scratch.read()  # @alias_read",
               "        tile.release()  # @alias_release"),
         "alias", [Run("n=8, 200 launches", dict(n=8), launches=200)],
         common=[("class Scratch(", "return cute.make_tensor(", "planted_delay(warp=1); return cute.make_tensor(")],
         delay="ReaderTask spins ~10 us before each scratch read", sanitize=True),
    Case("wgmma_release", "WGMMA stage released before wgmma.wait_group", WGMMA,
         "in the MMA loop, smem_ab.release() moved before smem_ab.retire(pending=1)",
         _swap("def mma_schedule(", "            smem_ab.retire(pending=1)  # the previous stage's wgmmas have retired ...",
               "            smem_ab.release()  # ... so it is released (split counters: one stage behind the wait)"),
         "wgmma", [Run("256x256x4096, 50 launches", dict(mnk=(256, 256, 4096)), launches=50)]),
    Case("pdl_order", "PDL launch before wait", RELU,
         "ConsumerTask calls launch_griddep() at the top of every iteration instead of after its loop",
         [(CONSUMER, "        buf.try_wait()", "        launch.launch_griddep(); buf.try_wait()"),
          (CONSUMER, "    launch.launch_griddep()", "    pass")], "relu", [Run("n=8", dict(n=8))],
         note="launched without the programmatic-stream-serialization attribute, as every kernel here: "
              "griddepcontrol.launch_dependents has no dependent grid to release"),
    Case("skipped_tile", "a bug only on a skipped tile", SKIP,
         "ConsumerTask's row loop taken out of skippable(): it also runs on over-launched (skipped) tiles",
         [(CONSUMER, "with wtwl.skippable(), domain_loop(0, rows, 1):", "with domain_loop(0, rows, 1):")], "skip",
         [Run("8x64, 2 skipped tiles", dict(shape=(8, 64), overlaunch=2)),
          Run("8x64, no skipped tile", dict(shape=(8, 64), overlaunch=0))]),
    Case("when_branch", "a bug only on one when_true branch", RELU,
         "the when_false(pos) branch also waits on buf (one wait more than produced on that path)",
         [(CONSUMER, "            dst.store_zero()", "            dst.store_zero(); buf.wait()")], "relu",
         [Run("n=8, every row > 0", dict(n=8, signs="pos")), Run("n=8, last row < 0", dict(n=8, signs="last_neg"))]),
    Case("dynamic_domain", "a dynamic-domain bug that appears only at some runtime trip counts", ICOPY,
         "domain-lane consumer lane 1 loops to n + 1 (the same count for even n, one row more for odd n)",
         [("def build(", "consume(rows, out, lane, rows_n, 2)", "consume(rows, out, lane, rows_n + lane, 2)")],
         "icopy", [Run("n=16", dict(n=16, mode="domain")), Run("n=17", dict(n=17, mode="domain"))],
         cpu_build=("build", {"mode": "domain"})),
    Case("split_skip_wait", "a split-consumer whose wait-only task skips a wait on one path", SPLIT,
         "SyncTask waits on smem_b only on even iterations (d.every(2))",
         [("def sync_schedule(", "    with domain_loop(start, end, step):", "    with domain_loop(start, end, step) as d:"),
          ("def sync_schedule(", "        smem_b.wait()", "        with d.every(2): smem_b.wait()")], "split",
         [Run("64 rows, 1 CTA, 100 launches", dict(rows=64, max_ctas=1), launches=100)],
         common=[("    def tma_load(self", "        s = self.staged()", "        planted_delay(warp=1); s = self.staged()")],
         delay="LoadB (warp 1) spins ~10 us before each TMA load", sanitize=True),
    Case("relu_leader_no_sync", "(issue lead) TaskWarpLeader commit without the task-wide barrier", RELU,
         "lowering variant: the 2-warp ProducerTask's leader commits without the named barrier (bar.sync) "
         "that orders the other warp's stage writes before it", [], "relu",
         [Run("n=8, 200 launches", dict(n=8), launches=200)],
         common=[("    def write(self, stage_info", "self._smem()[_lane64(), stage_info.stage_idx] = v",
                  "planted_delay(warp=1); self._smem()[_lane64(), stage_info.stage_idx] = v")],
         delay="ProducerTask's non-leader warp (warp 1) spins ~10 us before each stage write",
         lowering_patch="no_task_sync", sanitize=True,
         note="the checker verifies the program, not the lowering: its verdict is the same for both variants"),
]

# extra accepted kernels checked with compute-sanitizer (--sanitize): (label, base, launcher, Run, edits)
SANITIZE_EXTRA = [
    ("relu_pipeline", RELU, "relu", Run("n=8", dict(n=8)), []),
    ("relu_pipeline, producer signaling All", RELU, "relu", Run("n=8", dict(n=8)),
     [(RELU_CFG, "producer_group=threads(32)", "producer_group=threads(64)"),
      (RELU_CFG, "SignalingThreads.TaskWarpLeader)", "SignalingThreads.All)")]),
    ("interleaved_copy warp", ICOPY, "icopy", Run("n=16", dict(n=16, mode="warp")), []),
    ("interleaved_copy domain", ICOPY, "icopy", Run("n=16", dict(n=16, mode="domain")), []),
    ("skipped_tile", SKIP, "skip", Run("8x64", dict(shape=(8, 64), overlaunch=2)), []),
]


# ---------------------------------------------------------------------- launchers (GPU only)
def _relu(mod, torch, n=8, signs=None):
    x = torch.randn(n, 64, device="cuda")
    if signs == "pos":
        x = x.abs() + 0.5
    elif signs == "last_neg":
        x = x.abs() + 0.5
        x[-1] = -x[-1]
    y = torch.full_like(x, float("nan"))
    z = torch.zeros_like(x)
    mod.run(x, y, z)
    torch.cuda.synchronize()
    ry, rz = mod.reference(x)
    return bool(torch.equal(y, ry) and torch.equal(z, rz)), f"max|y-ref|={_maxdiff(torch, y, ry)}"


def _icopy(mod, torch, n=16, mode="warp"):
    x = torch.randn(n, 32, device="cuda")
    y = torch.full_like(x, float("nan"))
    mod.copy(x, y, mode=mode)
    torch.cuda.synchronize()
    return bool(torch.equal(x, y)), f"max|y-x|={_maxdiff(torch, y, x)}"


def _tma_copy(mod, torch, shape=(256, 512)):
    x = torch.randn(*shape, device="cuda").to(torch.bfloat16)
    y = torch.full_like(x, float("nan"))
    mod.copy(x, y)
    torch.cuda.synchronize()
    return bool(torch.equal(x, y)), f"max|y-x|={_maxdiff(torch, y, x)}"


def _wgmma(mod, torch, mnk=(256, 256, 4096)):
    m, n, k = mnk
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    c = torch.full((m, n), float("nan"), device="cuda").to(torch.bfloat16)
    mod.gemm(a, b, c)
    torch.cuda.synchronize()
    ref = a.double() @ b.double().T
    err = float((c.double() - ref).norm() / ref.norm())
    return err < 1e-2, f"rel_err={err:.2e}"


def _alias(mod, torch, n=8):
    x = torch.randn(n, 32, device="cuda")
    y = torch.full_like(x, float("nan"))
    mod.run(x, y)
    torch.cuda.synchronize()
    ref = mod.reference(x)
    return bool(torch.equal(y, ref)), f"max|y-ref|={_maxdiff(torch, y, ref)}"


def _skip(mod, torch, shape=(8, 64), overlaunch=2):
    x = torch.randn(*shape, device="cuda")
    y = torch.full_like(x, float("nan"))
    mod.run(x, y, overlaunch_tiles=overlaunch)
    torch.cuda.synchronize()
    return bool(torch.equal(x, y)), f"max|y-x|={_maxdiff(torch, y, x)}"


def _split(mod, torch, rows=64, max_ctas=1):
    a = torch.randn(rows, 32, device="cuda")
    b = torch.randn(rows, 32, device="cuda")
    out = torch.full_like(a, float("nan"))
    mod.run(a, b, out, max_ctas=max_ctas)
    torch.cuda.synchronize()
    ref = mod.reference(a, b)
    return bool(torch.allclose(out, ref)), f"max|out-ref|={_maxdiff(torch, out, ref)}"


def _maxdiff(torch, a, b) -> str:
    d = (a.float() - b.float()).abs()
    if torch.isnan(d).any():
        return f"nan in {int(torch.isnan(d).sum())} element(s)"
    return f"{float(d.max()):.3g}"


LAUNCHERS: Dict[str, Callable] = {"relu": _relu, "icopy": _icopy, "tma_copy": _tma_copy, "wgmma": _wgmma,
                                  "alias": _alias, "skip": _skip, "split": _split}


def case(key: str) -> Case:
    return next(c for c in CASES if c.key == key)
