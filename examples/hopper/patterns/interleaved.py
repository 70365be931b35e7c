"""Interleaved pipelines on the H200, the three shapes of the seed (one CTA, rows of fp32).

mode="warp_lane"   AsyncAsync, 8 stages, interleave_stride=4: a 4-warp producer task and a 4-warp
                   consumer task; warp w owns lane w (stages w, w + 4) and rows 4 i + w.
                   y = 3 x + 1, x: [n, 32].
mode="per_role"    TmaAsync, 8 stages, (1, 1, 4, 1), advance_on_wait: one dense TMA producer warp
                   (one row per stage), a 4-warp wait task (warp w reads rows 4 i + w) that hands
                   3 v + 1 to a 1-warp release task through a ``partials`` pipeline interleaved on
                   its producer side (4, 4, 1, 1); the release task stores the row and releases the
                   TMA stage. Every task walks rows in groups of 4 (dense ones unrolled at trace time).
mode="domain_lane" two 4-warp sibling tasks on even / odd rows share a score pipeline (1, 1, 2, 2) and
                   a probability pipeline (2, 2, 1, 1) with a 1-warp task that writes scores = 2 x and
                   stores the probabilities: y = sigmoid(2 x), x: [n, 128].
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

try:
    from ._path import _common
except ImportError:
    from _path import _common  # type: ignore

import cutlass
import cutlass.cute as cute

from warpsched import (MemoryResource, PipelineConfig, SmemAllocation, SmemAllocator, StageInfo, Task,
                       TaskLocalVariable, TaskManager, consumer_work, domain_loop, producer_work, schedule, threads,
                       trip_count)

LANES, STAGES, WIDTH = 4, 8, 32
DL_LANES, DL_WIDTH = 2, 128
BLOCK = {"warp_lane": 8 * 32, "per_role": 8 * 32, "domain_lane": 9 * 32}


def _warp_in_task():
    return cute.arch.make_warp_uniform(cute.arch.warp_idx()) % LANES


# ====================================================================== warp-lane / per-role rows
@dataclass(kw_only=True)
class Rows(MemoryResource):
    x: Any = None
    n: Any = 0
    atom: Any = None  # per_role: TMA atom + tensor of x (one row per box)
    tx: Any = None
    allocator: Any = None
    alloc: Any = None
    val: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.val = TaskLocalVariable(dtype=cutlass.Float32, default=0.0, docs="this lane's element")

    def get_smem_requirements(self):
        return [self.alloc]

    def staged(self):
        return cute.make_tensor(self.allocator.get(self.alloc), cute.make_layout((WIDTH, STAGES)))

    @producer_work
    @cute.jit
    def fill(self, stage_info: StageInfo):  # warp-lane: warp w writes row 4 i + w
        row = stage_info.loop_offset * LANES + _warp_in_task()
        lane = cute.arch.lane_idx()
        x, v = self.x, cutlass.Float32(0.0)
        if row < self.n:
            v = x[row, lane]
        self.staged()[lane, stage_info.stage_idx] = v

    @producer_work
    @cute.jit
    def fill_part(self, stage_info: StageInfo, j: cutlass.Constexpr = 0):  # per-role: TMA of row offset + j
        s = cute.make_tensor(self.allocator.get(self.alloc), cute.make_layout((1, WIDTH, STAGES),
                                                                             stride=(WIDTH, 1, WIDTH)))
        g = cute.local_tile(self.tx, (1, WIDTH), (None, None))
        t_s, t_g = cute.nvgpu.cpasync.tma_partition(self.atom, 0, cute.make_layout(1), cute.group_modes(s, 0, 2),
                                                     cute.group_modes(g, 0, 2))
        stage_info.tma_copy(self.atom, t_g[(None, stage_info.loop_offset + j, 0)], t_s[(None, stage_info.stage_idx)])

    @consumer_work(returns=val)
    def read(self, stage_info: StageInfo):
        return self.staged()[cute.arch.lane_idx(), stage_info.stage_idx]


@dataclass(kw_only=True)
class Out(MemoryResource):
    y: Any = None
    n: Any = 0

    @producer_work
    @cute.jit
    def store(self, stage_info: StageInfo, v):  # warp-lane: row 4 i + w
        row = stage_info.loop_offset * LANES + _warp_in_task()
        y, nv = self.y, v * cutlass.Float32(3.0) + cutlass.Float32(1.0)  # locals: `self` is not carried by `if`
        if row < self.n:
            y[row, cute.arch.lane_idx()] = nv


@dataclass(kw_only=True)
class Partials(MemoryResource):
    y: Any = None
    n: Any = 0
    allocator: Any = None
    alloc: Any = None

    def get_smem_requirements(self):
        return [self.alloc]

    def staged(self):
        return cute.make_tensor(self.allocator.get(self.alloc), cute.make_layout((WIDTH, LANES)))

    @producer_work
    @cute.jit
    def write(self, stage_info: StageInfo, v):
        self.staged()[cute.arch.lane_idx(), stage_info.stage_idx] = v * cutlass.Float32(3.0) + cutlass.Float32(1.0)

    @consumer_work
    @cute.jit
    def drain(self, stage_info: StageInfo, j: cutlass.Constexpr = 0):
        row = stage_info.loop_offset + j
        y, v = self.y, self.staged()[cute.arch.lane_idx(), stage_info.stage_idx]
        if row < self.n:
            y[row, cute.arch.lane_idx()] = v


@schedule
def wl_produce(rows, iters):
    with domain_loop(0, iters, 1):
        rows.acquire()
        rows.fill()
        rows.commit()


@schedule
def wl_consume(rows, out, iters):
    with domain_loop(0, iters, 1):
        rows.wait()
        v = rows.read()
        out.store(v=v)
        rows.release()


@schedule
def pr_produce(rows, end):
    with domain_loop(0, end, LANES):
        for j in range(LANES):
            rows.acquire()
            rows.fill_part(j=j)
            rows.commit()


@schedule
def pr_wait(rows, partials, end):  # warp w: rows offset + w
    with domain_loop(0, end, LANES):
        rows.wait()
        v = rows.read()
        partials.acquire()
        partials.write(v=v)
        partials.commit()


@schedule
def pr_release(partials, rows, end):
    with domain_loop(0, end, LANES):
        for j in range(LANES):
            partials.wait()
            partials.drain(j=j)
            rows.release()
            partials.release()


def build_rows(mode, x=None, y=None, n=None, atom=None, tx=None, verbose=True, **manager_options):
    """Warp-lane and per-role programs, for ``warpsched check`` (CPU: ``n`` None) and the kernel
    (``n`` = rows of x)."""
    allocator = SmemAllocator()
    if mode == "warp_lane":
        cfg = PipelineConfig.create_async_async_pipeline_cfg(num_stages=STAGES, producer_group=threads(32),
                                                            consumer_group=threads(32), interleave_stride=LANES)
    else:
        cfg = PipelineConfig.create_tma_async_pipeline_cfg(num_stages=STAGES, num_bytes=WIDTH * 4,
                                                          producer_group=threads(1), consumer_group=threads(1),
                                                          advance_on_wait=True, interleave_stride=(1, 1, LANES, 1))
    rows = Rows(name="rows", pipeline_config=cfg, x=x, n=n, atom=atom, tx=tx, allocator=allocator,
                alloc=SmemAllocation("rows", dtype=cutlass.Float32, count=WIDTH * STAGES, alignment=128))
    allocator.add_resource(rows)
    if mode == "warp_lane":
        out = Out(name="out", y=y, n=n)
        allocator.compute_layout()
        iters = trip_count("row_groups", None if n is None else (n + LANES - 1) // LANES)  # LANES rows each
        tasks = [Task(name="Producers", dst_resources=[rows], warp_idx=0, num_warps=LANES,
                      schedule=wl_produce(rows, iters)),
                 Task(name="Consumers", src_resources=[rows], dst_resources=[out], warp_idx=LANES, num_warps=LANES,
                      schedule=wl_consume(rows, out, iters))]
        graph = {rows: [], out: [rows]}
    else:
        partials = Partials(name="partials", y=y, n=n, allocator=allocator,
                            alloc=SmemAllocation("partials", dtype=cutlass.Float32, count=WIDTH * LANES,
                                                 alignment=128),
                            pipeline_config=PipelineConfig.create_async_async_pipeline_cfg(
                                num_stages=LANES, producer_group=threads(32), consumer_group=threads(32),
                                interleave_stride=(LANES, LANES, 1, 1)))
        allocator.add_resource(partials)
        allocator.compute_layout()
        # rows rounded up to whole groups of LANES (the seed's tile count, a multiple of 4)
        end = trip_count("rows_rounded", None if n is None else (n + LANES - 1) // LANES * LANES, divisibility=LANES)
        tasks = [Task(name="Producer", dst_resources=[rows], warp_idx=0, num_warps=1, schedule=pr_produce(rows, end)),
                 Task(name="WaitTask", src_resources=[rows], dst_resources=[partials], warp_idx=4, num_warps=LANES,
                      schedule=pr_wait(rows, partials, end)),
                 Task(name="ReleaseTask", src_resources=[partials, rows], warp_idx=1, num_warps=1,
                      schedule=pr_release(partials, rows, end))]
        graph = {rows: [], partials: [rows]}
    return TaskManager(tasks=tasks, resource_dependency_graph=graph, smem_allocator=allocator, verbose=verbose,
                       **manager_options)


# ====================================================================== domain-lane "softmax"
@dataclass(kw_only=True)
class Scores(MemoryResource):
    x: Any = None
    allocator: Any = None
    alloc: Any = None
    p: Any = TaskLocalVariable.uninitialized()

    def __post_init__(self):
        self.p = TaskLocalVariable(dtype=cutlass.Float32, default=0.0, docs="this thread's probability")

    def get_smem_requirements(self):
        return [self.alloc]

    def staged(self):
        return cute.make_tensor(self.allocator.get(self.alloc), cute.make_layout((DL_WIDTH, DL_LANES)))

    @producer_work
    @cute.jit
    def mma_scores(self, stage_info: StageInfo):  # 1 warp: 4 columns per lane
        lane = cute.arch.lane_idx()
        s = self.staged()
        for c in cutlass.range_constexpr(DL_WIDTH // 32):
            s[lane + 32 * c, stage_info.stage_idx] = cutlass.Float32(2.0) * self.x[stage_info.loop_offset, lane + 32 * c]

    @consumer_work(returns=p)
    @cute.jit
    def compute_softmax(self, stage_info: StageInfo):  # 4 warps: one column per thread
        tidx, _, _ = cute.arch.thread_idx()
        s = self.staged()[tidx % DL_WIDTH, stage_info.stage_idx]
        return cutlass.Float32(1.0) / (cutlass.Float32(1.0) + cute.math.exp(-s))


@dataclass(kw_only=True)
class Probs(MemoryResource):
    y: Any = None
    allocator: Any = None
    alloc: Any = None

    def get_smem_requirements(self):
        return [self.alloc]

    def staged(self):
        return cute.make_tensor(self.allocator.get(self.alloc), cute.make_layout((DL_WIDTH, DL_LANES)))

    @producer_work
    @cute.jit
    def store(self, stage_info: StageInfo, p):
        tidx, _, _ = cute.arch.thread_idx()
        self.staged()[tidx % DL_WIDTH, stage_info.stage_idx] = p

    @consumer_work
    @cute.jit
    def mma_pv(self, stage_info: StageInfo):  # 1 warp: stores the row of probabilities
        lane = cute.arch.lane_idx()
        s = self.staged()
        for c in cutlass.range_constexpr(DL_WIDTH // 32):
            self.y[stage_info.loop_offset, lane + 32 * c] = s[lane + 32 * c, stage_info.stage_idx]


@schedule
def dl_mma(scores, probs, n):
    with domain_loop(0, n, 1):
        scores.acquire()
        scores.mma_scores()
        scores.commit()
        probs.wait()
        probs.mma_pv()
        probs.release()


def build_domain_lane(x=None, y=None, n=None, verbose=True, **manager_options):
    """The domain-lane program, for ``warpsched check`` (CPU: ``n`` None) and the kernel."""
    n = trip_count("rows", n)
    allocator = SmemAllocator()
    scores = Scores(name="scores", x=x, allocator=allocator,
                    alloc=SmemAllocation("scores", dtype=cutlass.Float32, count=DL_WIDTH * DL_LANES, alignment=128),
                    pipeline_config=PipelineConfig.create_async_async_pipeline_cfg(
                        num_stages=DL_LANES, producer_group=threads(32), consumer_group=threads(128),
                        interleave_stride=(1, 1, DL_LANES, DL_LANES)))
    probs = Probs(name="probs", y=y, allocator=allocator,
                  alloc=SmemAllocation("probs", dtype=cutlass.Float32, count=DL_WIDTH * DL_LANES, alignment=128),
                  pipeline_config=PipelineConfig.create_async_async_pipeline_cfg(
                      num_stages=DL_LANES, producer_group=threads(128), consumer_group=threads(32),
                      interleave_stride=(DL_LANES, DL_LANES, 1, 1)))
    allocator.add_resource(scores)
    allocator.add_resource(probs)
    allocator.compute_layout()

    def make_softmax_task(lane, warp_idx):
        @schedule
        def softmax_lane(scores, probs):
            with domain_loop(lane, n, DL_LANES):
                scores.wait()
                p = scores.compute_softmax()
                probs.acquire()
                probs.store(p=p)
                probs.commit()
                scores.release()

        return Task(src_resources=[scores], dst_resources=[probs], warp_idx=warp_idx, num_warps=4,
                    schedule=softmax_lane(scores, probs), name=f"SoftmaxLane{lane}")

    tasks = [make_softmax_task(0, 0), make_softmax_task(1, 4),
             Task(name="Mma", src_resources=[probs], dst_resources=[scores], warp_idx=8, num_warps=1,
                  schedule=dl_mma(scores, probs, n))]
    return TaskManager(tasks=tasks, resource_dependency_graph={scores: [], probs: [scores]},
                       smem_allocator=allocator, verbose=verbose, **manager_options)


def build(mode="warp_lane", **kw):
    if mode == "domain_lane":
        return build_domain_lane(**kw)
    return build_rows(mode, **kw)


# ====================================================================== host
class Interleaved:
    def __init__(self, mode):
        self.mode = mode

    @cute.jit
    def __call__(self, mx: cute.Tensor, my: cute.Tensor, stream):
        atom, tx = None, None
        if cutlass.const_expr(self.mode == "per_role"):
            atom, tx = cute.nvgpu.cpasync.make_tiled_tma_atom(cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp(), mx,
                                                              cute.make_layout((1, WIDTH), stride=(WIDTH, 1)),
                                                              (1, WIDTH))
        self.kernel(mx, my, atom, tx).launch(grid=[1, 1, 1], block=[BLOCK[self.mode], 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mx: cute.Tensor, my: cute.Tensor, atom, tx):
        mgr = build(self.mode, x=mx, y=my, n=cute.size(mx, mode=[0]), atom=atom, tx=tx, verbose=False) if self.mode != "domain_lane" else \
            build_domain_lane(x=mx, y=my, n=cute.size(mx, mode=[0]), verbose=False)
        mgr.setup_resources_and_tasks()
        mgr.run()


_CACHE = {}


def width(mode):
    return DL_WIDTH if mode == "domain_lane" else WIDTH


def run(x, y, mode):
    mx, my = _common.to_cute(x, 1), _common.to_cute(y, 1)
    stream = _common.current_stream()
    if mode not in _CACHE:
        _CACHE[mode] = cute.compile(Interleaved(mode), mx, my, stream, options=_common.PTX_OPTIONS)
    _CACHE[mode](mx, my, stream)


def reference(x, mode):
    import torch

    if mode == "domain_lane":
        return torch.sigmoid(2.0 * x)
    return 3.0 * x + 1.0


def compile_for_cpu(arch="sm_90a", mode="warp_lane"):
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    n = cute.sym_int32()
    w = width(mode)
    x, y = (make_fake_tensor(cutlass.Float32, (n, w), (w, 1), assumed_align=16) for _ in range(2))
    return cute.compile(Interleaved(mode), x, y, make_fake_stream(), options=_common.ptx_options(arch))


if __name__ == "__main__":
    for m in ("warp_lane", "per_role", "domain_lane"):
        print(m, _common.count_ptx(compile_for_cpu(mode=m).artifacts.PTX))
