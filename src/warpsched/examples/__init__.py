"""Bundled examples: each module has ``build(verbose=True) -> TaskManager`` and checks on the CPU.

``warpsched check --example NAME`` runs one; ``warpsched check --list-examples`` lists them.
"""
EXAMPLES = {
    "grid_stride_copy": "One task copies a GMEM vector with a grid-stride domain loop.",
    "tma_copy": "A TMA load task and an async store task around a TmaAsync SMEM pipeline.",
    "gemm": "GEMM-shaped load / mma / store skeleton (TmaUmma then UmmaAsync).",
    "gemm_persistent": "The GEMM skeleton, persistent over a static WorkQueue.",
    "pingpong": "Seed pattern: one buffer transformed in place by two tasks (self-edge).",
    "split_consumer": "Seed pattern: wait in a sync task, work + release in the MMA task via a proxy.",
    "interleaved": "Seed pattern: interleaved pipeline lanes (warp-lane mode).",
    "leader_routed": "Seed pattern: one leader warp arms the TMA barrier for all producer warps.",
}
