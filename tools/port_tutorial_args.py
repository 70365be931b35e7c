"""Host-function arguments of CUTLASS's TS tutorials for a CPU compile (fake tensors), and the
module switches that select a tutorial's configuration (``--no-tma`` / ``--mode``).

Used by ``tools/port_tutorials.py`` (one configuration per child interpreter). Every entry
builds the arguments the tutorial's own ``_prepare`` / ``run`` would pass to ``cute.compile``,
with fake tensors of the tutorial's default problem size in place of torch tensors.
"""
from __future__ import annotations

# key -> (relative path, arch, name of the TS kernel function whose PTX entry is counted)
TUTORIALS = {
    "01_copy_grid_stride": ("01_copy_basics_ts/01_copy_grid_stride.py", "sm_90a", "gmem_copy_kernel"),
    "02_copy_tma": ("01_copy_basics_ts/02_copy_tma.py", "sm_90a", "tma_copy_kernel"),
    # added to the CUTLASS repository after the others (schedule guards: first_iter, every, when_true, last_iter)
    "03_copy_tma_conditional": ("01_copy_basics_ts/03_copy_tma_conditional.py", "sm_90a",
                                "tma_copy_conditional_kernel"),
    "03_copy_persistent_skip_tile": ("03_persistent_scheduling_dynamic_domain_ts/01_copy_persistent_skip_tile.py",
                                     "sm_90a", "tma_copy_persistent_skip_kernel"),
    "03_copy_varlen_dynamic_domain": ("03_persistent_scheduling_dynamic_domain_ts/02_copy_varlen_dynamic_domain.py",
                                      "sm_90a", "varlen_copy_kernel"),
    "02_gemm_simple": ("02_gemm_simple_ts/01_fp16_bf16_gemm_3.py", "sm_100a", "kernel"),
    "06_gemm_split_k": ("06_gemm_split_k_fp16_ts/01_gemm_split_k_fp16.py", "sm_100a", "kernel"),
    # the ten configurations added to the CUTLASS repository after nvidia-cutlass-dsl 4.8.1
    "04_01_gemm_cluster": ("04_gemm_bf16_advanced_ts/01_fp16_bf16_gemm_3_cluster.py", "sm_100a", "kernel"),
    "04_02_gemm_cute_cluster": ("04_gemm_bf16_advanced_ts/02_fp16_bf16_gemm_3_cute_cluster.py", "sm_100a", "kernel"),
    "05_01_gemm_nvfp4": ("05_gemm_nvfp4_ts/01_gemm_nvfp4.py", "sm_100a", "kernel"),
    "07_01_merge_copy": ("07_group_pipeline_ts/01_merge_copy.py", "sm_90a", "merge_copy_kernel"),
    "07_01_merge_copy_no_tma": ("07_group_pipeline_ts/01_merge_copy.py", "sm_90a", "merge_copy_kernel"),
    "07_02_merge_gemm": ("07_group_pipeline_ts/02_merge_gemm.py", "sm_100a", "merge_gemm_kernel"),
    # the later version's --ab-sync-mode fused: one full and one empty barrier for the A / B group
    "07_02_merge_gemm_fused": ("07_group_pipeline_ts/02_merge_gemm.py", "sm_100a", "merge_gemm_kernel"),
    "07_03_resadd_gmem": ("07_group_pipeline_ts/03_merge_gemm_resadd.py", "sm_100a", "kernel"),
    "07_03_resadd_tma": ("07_group_pipeline_ts/03_merge_gemm_resadd.py", "sm_100a", "kernel"),
    "07_04_fork_tma": ("07_group_pipeline_ts/04_fork_load_gemm_act.py", "sm_100a", "fork_kernel"),
    "07_04_fork_gmem": ("07_group_pipeline_ts/04_fork_load_gemm_act.py", "sm_100a", "fork_kernel"),
}
OLD = ["01_copy_grid_stride", "02_copy_tma", "03_copy_persistent_skip_tile", "03_copy_varlen_dynamic_domain",
       "02_gemm_simple", "06_gemm_split_k"]
NEW = [k for k in TUTORIALS if k not in OLD]
# what the tutorial's command line selects, as it sets it (its CLI flag in the table)
FLAGS = {"07_01_merge_copy": "", "07_01_merge_copy_no_tma": "--no-tma",
         "07_02_merge_gemm_fused": "--ab-sync-mode fused", "07_03_resadd_gmem": "--mode gmem",
         "07_03_resadd_tma": "--mode tma", "07_04_fork_tma": "--mode tma", "07_04_fork_gmem": "--mode gmem"}


def fake(dtype, shape, stride=None):
    """A row-major (or ``stride``) fake tensor, 16-byte aligned."""
    from cutlass.cute.runtime import make_fake_tensor

    if stride is None:
        stride, acc = [], 1
        for s in reversed(shape):
            stride.insert(0, acc)
            acc *= s
    return make_fake_tensor(dtype, tuple(shape), tuple(stride), assumed_align=16)


def fake_args(key: str, mod):
    """(host function, its arguments) of configuration ``key`` of the loaded tutorial ``mod``."""
    import cutlass
    from cutlass.cute.runtime import make_fake_stream

    if key == "01_copy_grid_stride":
        n = 1 << 24
        return mod.gmem_copy_kernel_host, (cutlass.Int32(n), fake(cutlass.Int16, (n,)), fake(cutlass.Int16, (n,)),
                                           cutlass.Int32(256), 8)
    if key == "02_copy_tma":
        rows, cols = 256, 512
        return mod.tma_copy_kernel_host, ((rows, cols), fake(cutlass.Float16, (rows, cols)),
                                          fake(cutlass.Float16, (rows, cols)), False)
    if key == "03_copy_tma_conditional":
        rows, cols = 256, 512  # the tutorial's --rows_cols default; its --highlight-row default is 128
        f16 = cutlass.Float16
        return mod.tma_copy_conditional_kernel_host, ((rows, cols), 128, fake(f16, (rows, cols)),
                                                      fake(f16, (rows, cols)), fake(f16, (rows, 4)))
    if key == "03_copy_persistent_skip_tile":
        rows, cols = 256, 512
        return mod.tma_copy_persistent_skip_kernel_host, ((rows, cols), fake(cutlass.Float16, (rows, cols)),
                                                          fake(cutlass.Float16, (rows, cols)), cols // 128, 4)
    if key == "03_copy_varlen_dynamic_domain":
        n_seg, max_len, total = 8, 512, 2048
        return mod.host_function, (fake(cutlass.Float32, (total,)), fake(cutlass.Float32, (n_seg, max_len)),
                                   fake(cutlass.Int32, (n_seg + 1,)), n_seg, 132)
    if key == "02_gemm_simple":
        m, n, k = 256, 512, 256
        a, b, c = (fake(cutlass.Float16, s) for s in ((m, k), (n, k), (m, n)))
        return mod.host_function, (a, b, c, (m, n, k), make_fake_stream())
    if key == "06_gemm_split_k":
        m, n, k = 256, 64, 512
        a, b, c = (fake(cutlass.Float16, s) for s in ((m, k), (n, k), (m, n)))
        return mod.host_function, (a, b, c, (m, n, k))
    if key.startswith("04_0"):
        m, n, k = 512, 512, 512  # the tutorial's --mnk default
        dt = mod.io_dtype
        a, b, c = fake(dt, (m, k)), fake(dt, (n, k)), fake(dt, (m, n))
        clusters = 148 // (mod.cluster_shape_mnk[0] * mod.cluster_shape_mnk[1])  # B200: 148 SMs
        if key == "04_01_gemm_cluster":
            return mod.host_function, (a, b, c, (m, n, k), clusters, make_fake_stream(), None)
        return mod.host_function, (a, b, c, (m, n, k), clusters)
    if key == "05_01_gemm_nvfp4":
        from cutlass.cute.runtime import make_ptr

        mod.refresh_derived_config()
        gmem = cutlass.AddressSpace.gmem
        ptrs = [make_ptr(dt, 0x10000 * (i + 1), gmem, assumed_align=al) for i, (dt, al) in enumerate(
            ((mod.ab_dtype, 16), (mod.ab_dtype, 16), (mod.sf_dtype, 32), (mod.sf_dtype, 32), (mod.c_dtype, 32)))]
        return mod.gemm, (*ptrs, (512, 256, 256, 1), make_fake_stream())
    if key.startswith("07_01"):
        mod.use_tma_for_b = key == "07_01_merge_copy"
        n = 1024  # the tutorial's --n default
        f16 = cutlass.Float16
        return mod.host_function, (fake(f16, (n,)), fake(f16, (1, n)), fake(f16, (n,)), fake(f16, (1, n)),
                                   n // mod.tile_m)
    m, n, k = 256, 256, 256  # the 07 GEMMs' --mnk default
    dt = mod.io_dtype
    a, b, d = fake(dt, (m, k)), fake(dt, (n, k)), fake(dt, (m, n))
    if key.startswith("07_02"):
        import inspect

        if "ab_sync_mode" not in inspect.signature(mod.host_function).parameters:  # the first version: Merge only
            if key.endswith("fused"):
                raise KeyError(f"{key}: this version of the tutorial has no --ab-sync-mode")
            return mod.host_function, (a, b, d, (m, n, k))
        mode = mod.PipelineGroupMode.FusedMerge if key.endswith("fused") else mod.PipelineGroupMode.Merge
        return mod.host_function, (a, b, d, (m, n, k), mode)
    if key.startswith("07_03"):
        return mod.host_function, (a, b, d, fake(dt, (m, n)), (m, n, k), key == "07_03_resadd_tma")
    if key.startswith("07_04"):
        tiles = (m // mod.mma_tiler_mnk[0]) * (k // mod.mma_tiler_mnk[2])
        return mod.host_fn, (a, b, d, fake(cutlass.Float16, (tiles, mod.a_tile_elems)), (m, n, k),
                             key == "07_04_fork_tma")
    raise KeyError(key)
