"""Hand-written warp-specialized TMA copy kernel for Hopper (sm_90a), CuTe DSL 4.8.1.

Y[M, N] = X[M, N] (row-major, any dtype whose row stride is a multiple of 16 bytes).

Structure (the "hand-written baseline" our schedule lowering is compared against):

  CTA = 2 warps (64 threads), 3 stages x 32 KiB by default (2 CTAs/SM resident).
  Persistent over tiles when max_ctas < #tiles: balanced grid = ceil(#tiles / ceil(#tiles / max_ctas))
  so every CTA gets the same tile count, tiles strided by gridDim (chunked=True: contiguous runs).
  Host default max_ctas = 2**30, i.e. one tile per CTA: on the H200 that measured 4.10 TB/s
  (0.99x torch) against 3.90-3.96 TB/s (0.95x) for every persistent grid/depth tried (see
  bench/README_handwritten.md); the pipeline code is identical either way.
  warp 0  producer: for each tile t owned by this CTA:
              pipe.producer_acquire(state)          # wait EMPTY[i], arrive.expect_tx FULL[i]
              TMA load  X tile -> sBuf[i]           # cp.async.bulk.tensor ... completes FULL[i]
              state.advance()
          then pipe.producer_tail(state)            # wait until every stage was released
  warp 1  consumer: for each tile t owned by this CTA:
              pipe.consumer_wait(read)              # try_wait FULL[i]
              lane 0: TMA store sBuf[i] -> Y tile    # cp.async.bulk.tensor global.shared
                      bulk commit_group; bulk wait_group.read <= LAG pending
              release the stage whose store finished reading SMEM (LAG tiles behind)
          then drain: bulk wait_group 0, release the last LAG stages.

  TMA zero-fills out-of-bounds loads and clips out-of-bounds stores, so ragged M and N work;
  the only requirement is a 16-byte aligned base and row stride (N * elem_bytes % 16 == 0).

Host entry points:
  tma_copy(x, y)                      torch tensors on the GPU (2D, row-major, same dtype/shape)
  compile_for_cpu(dtype=...)          compiles against fake tensors (CUTE_DSL_ARCH=sm_90a), returns
                                      the compiled object; .artifacts.PTX holds the PTX.
"""

import os

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")  # must precede `import cutlass`
# keep PTX (".artifacts.PTX") but dump the files outside the repo
PTX_DIR = os.path.join(os.environ.get("TMPDIR", "/tmp"), "warpsched_handwritten_ptx")
os.makedirs(PTX_DIR, exist_ok=True)  # must exist, else .artifacts.PTX is just a path
PTX_OPTIONS = "--keep-ptx --dump-dir=" + PTX_DIR

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.memory  # noqa: F401  (SmemAllocator)
import cuda.bindings.driver as cuda


class TmaCopyKernel:
    def __init__(self, dtype, tile_mn=None, num_stages=3, store_lag=1, max_ctas=264, chunked=False):
        self.dtype = dtype
        elem_bytes = dtype.width // 8
        if tile_mn is None:
            # 32 KiB tiles: inner box 256 elements (TMA box dims are <= 256 each).
            tile_mn = (32 * 1024 // (256 * elem_bytes), 256)
        self.tile_mn = tuple(tile_mn)
        self.num_stages = num_stages
        self.store_lag = store_lag  # TMA-store groups allowed in flight before a stage is released
        assert 0 <= store_lag < num_stages
        self.max_ctas = max_ctas
        self.chunked = chunked  # CTA b takes tiles [b*T, (b+1)*T) instead of b, b+G, b+2G, ...
        self.threads = 64  # warp 0 = TMA producer, warp 1 = consumer (TMA store)
        self.tile_bytes = self.tile_mn[0] * self.tile_mn[1] * elem_bytes

    @cute.jit
    def __call__(self, mX: cute.Tensor, mY: cute.Tensor, stream: cuda.CUstream):
        # One stage of SMEM: plain row-major tile (no swizzle needed: only TMA touches it).
        smem_layout = cute.make_layout(self.tile_mn, stride=(self.tile_mn[1], 1))
        smem_layout_staged = cute.make_layout(
            (*self.tile_mn, self.num_stages),
            stride=(self.tile_mn[1], 1, self.tile_mn[0] * self.tile_mn[1]),
        )
        # TMA descriptors are built on the host from the global tensor + one-stage smem layout.
        tma_load_atom, tma_x = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp(), mX, smem_layout, self.tile_mn
        )
        tma_store_atom, tma_y = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(), mY, smem_layout, self.tile_mn
        )

        @cute.struct
        class SharedStorage:
            # full[0..S) then empty[0..S): PipelineTmaAsync lays them out this way.
            mbar: cute.struct.MemRange[cutlass.Int64, self.num_stages * 2]
            buf: cute.struct.Align[
                cute.struct.MemRange[self.dtype, cute.cosize(smem_layout_staged)], 1024
            ]

        self.shared_storage = SharedStorage

        tiles = cute.ceil_div(mX.shape, self.tile_mn)
        num_tiles = tiles[0] * tiles[1]
        # Balanced persistent grid: every CTA gets the same number of tiles (up to one), so no
        # almost-empty last round (8192 tiles on 264 CTAs = 31.03 rounds cost ~3% before this).
        tiles_per_cta = cute.ceil_div(num_tiles, self.max_ctas)
        grid_x = cute.ceil_div(num_tiles, tiles_per_cta)
        self.kernel(tma_load_atom, tma_x, tma_store_atom, tma_y, smem_layout_staged).launch(
            grid=[grid_x, 1, 1], block=[self.threads, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(
        self,
        tma_load_atom: cute.CopyAtom,
        mX: cute.Tensor,
        tma_store_atom: cute.CopyAtom,
        mY: cute.Tensor,
        smem_layout_staged: cute.Layout,
    ):
        S = self.num_stages
        LAG = self.store_lag
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        lane = tidx % 32

        if warp_idx == 0:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_load_atom)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_store_atom)

        smem = cutlass.memory.SmemAllocator()
        storage = smem.allocate(self.shared_storage)

        # Pipeline: producer = 1 thread (the TMA issuer arrives with expect_tx),
        # consumer arrive count = 1 per consumer *warp* (consumer_release arrives from lane 0).
        pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar.data_ptr(),
            num_stages=S,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 1),
            tx_count=self.tile_bytes,
            cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)),
            defer_sync=False,  # does mbarrier_init_fence + CTA barrier itself
        )

        sBuf = storage.buf.get_tensor(smem_layout_staged)  # (TM, TN, S)
        gX = cute.local_tile(mX, self.tile_mn, (None, None))  # (TM, TN, RestM, RestN)
        gY = cute.local_tile(mY, self.tile_mn, (None, None))
        tXsX, tXgX = cute.nvgpu.cpasync.tma_partition(
            tma_load_atom, 0, cute.make_layout(1),
            cute.group_modes(sBuf, 0, 2), cute.group_modes(gX, 0, 2),
        )  # tXsX: (TMA, S)   tXgX: (TMA, RestM, RestN)
        tYsY, tYgY = cute.nvgpu.cpasync.tma_partition(
            tma_store_atom, 0, cute.make_layout(1),
            cute.group_modes(sBuf, 0, 2), cute.group_modes(gY, 0, 2),
        )
        tiles_n = cute.size(gX, mode=[3])
        num_tiles = cute.size(gX, mode=[2]) * tiles_n
        tpc = cute.ceil_div(num_tiles, gdim)  # tiles per CTA (chunked order)
        if cutlass.const_expr(self.chunked):
            t_begin, t_end, t_step = bidx * tpc, cutlass.min((bidx + 1) * tpc, num_tiles), 1
        else:
            t_begin, t_end, t_step = bidx, num_tiles, gdim

        if warp_idx == 0:
            # ---------------- producer warp ----------------
            prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, S)
            for t in cutlass.range(t_begin, t_end, t_step, unroll=1):
                tm = t // tiles_n
                tn = t % tiles_n
                pipe.producer_acquire(prod)
                cute.copy(
                    tma_load_atom,
                    tXgX[(None, tm, tn)],
                    tXsX[(None, prod.index)],
                    tma_bar_ptr=pipe.producer_get_barrier(prod),
                )
                pipe.producer_commit(prod)  # no-op for TMA (complete_tx does it)
                prod.advance()
            pipe.producer_tail(prod)

        if warp_idx == 1:
            # ---------------- consumer warp ----------------
            read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, S)
            rel = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, S)
            for t in cutlass.range(t_begin, t_end, t_step, unroll=1):
                tm = t // tiles_n
                tn = t % tiles_n
                pipe.consumer_wait(read)
                if lane == 0:
                    cute.copy(tma_store_atom, tYsY[(None, read.index)], tYgY[(None, tm, tn)])
                    cute.arch.cp_async_bulk_commit_group()
                    # at most LAG stores may still be reading SMEM
                    cute.arch.cp_async_bulk_wait_group(LAG, read=True)
                read.advance()
                if read.count > LAG:
                    pipe.consumer_release(rel)  # lane 0 arrives on EMPTY[rel.index]
                    rel.advance()
            if lane == 0:
                cute.arch.cp_async_bulk_wait_group(0, read=False)
            for _ in cutlass.range(rel.count, read.count, unroll=1):
                pipe.consumer_release(rel)
                rel.advance()


# ----------------------------------------------------------------------------------------
# Host side
# ----------------------------------------------------------------------------------------
_CACHE = {}


def _cutlass_dtype(torch_dtype):
    import torch

    return {
        torch.float32: cutlass.Float32,
        torch.bfloat16: cutlass.BFloat16,
        torch.float16: cutlass.Float16,
    }[torch_dtype]


def _check_args(x, y):
    assert x.dim() == 2 and y.shape == x.shape and y.dtype == x.dtype, "x, y: same 2D shape/dtype"
    assert x.is_cuda and y.is_cuda
    for t in (x, y):
        assert t.stride(1) == 1, "row-major (unit stride along N) required"
        assert (t.stride(0) * t.element_size()) % 16 == 0, (
            "TMA needs the row stride to be a multiple of 16 bytes "
            f"(N * elem_bytes = {t.stride(0) * t.element_size()})"
        )
        assert t.data_ptr() % 16 == 0, "TMA needs a 16-byte aligned base address"


def _num_sms():
    import torch

    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def get_compiled(x, y, options="", **kw):
    """Compile (cached per dtype/config) against dynamic-shape tensors."""
    import torch
    from cutlass.cute.runtime import from_dlpack

    dt = _cutlass_dtype(x.dtype)
    key = (dt, options, tuple(sorted(kw.items())))
    mX = from_dlpack(x, assumed_align=16).mark_layout_dynamic(leading_dim=1)
    mY = from_dlpack(y, assumed_align=16).mark_layout_dynamic(leading_dim=1)
    if key not in _CACHE:
        # default: one CTA per tile (grid = #tiles, 2 CTAs/SM resident with 3 x 32 KiB stages):
        # measured 0.99x torch copy; the persistent grids (max_ctas = k * #SMs) measured 0.95x.
        kern = TmaCopyKernel(dt, max_ctas=kw.pop("max_ctas", 1 << 30), **kw)
        stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
        _CACHE[key] = cute.compile(kern, mX, mY, stream, options=options)
    return _CACHE[key], mX, mY


def tma_copy(x, y, **kw):
    """y.copy_(x) through the hand-written TMA pipeline. Returns a zero-arg launcher too."""
    import torch

    _check_args(x, y)
    f, mX, mY = get_compiled(x, y, **kw)
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    f(mX, mY, stream)
    return lambda: f(mX, mY, stream)


def compile_for_cpu(dtype=cutlass.BFloat16, options=None, **kw):
    """Compile with fake tensors (no GPU needed). Returns the compiled object."""
    from cutlass.cute.runtime import make_fake_tensor, make_fake_stream

    div = 16 * 8 // dtype.width  # row stride divisible by 16 bytes
    M, N = cute.sym_int32(), cute.sym_int32(divisibility=div)
    ld = cute.sym_int64(divisibility=div)
    x = make_fake_tensor(dtype, (M, N), (ld, 1), assumed_align=16)
    y = make_fake_tensor(dtype, (M, N), (ld, 1), assumed_align=16)
    kern = TmaCopyKernel(dtype, **kw)
    return cute.compile(kern, x, y, make_fake_stream(), options=options or PTX_OPTIONS)


if __name__ == "__main__":
    import sys

    dt = {"bf16": cutlass.BFloat16, "fp32": cutlass.Float32}[sys.argv[1] if len(sys.argv) > 1 else "bf16"]
    f = compile_for_cpu(dt)
    ptx = f.artifacts.PTX
    print(f"PTX: {len(ptx.splitlines())} lines")
    for pat in ["mbarrier.init", "mbarrier.arrive", "mbarrier.try_wait", "expect_tx",
                "cp.async.bulk.tensor", "cp.async.bulk.commit_group", "cp.async.bulk.wait_group"]:
        print(f"{pat:30s} {sum(pat in l for l in ptx.splitlines())}")
