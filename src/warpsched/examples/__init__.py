"""Bundled examples: each module has ``build(verbose=True) -> TaskManager`` and checks on the CPU.

``warpsched check --example NAME`` runs one; ``warpsched check --list-examples`` lists them.
"""
EXAMPLES = {
    "grid_stride_copy": "One task copies a GMEM vector with a grid-stride domain loop.",
    "tma_copy": "A TMA load task and an async store task around a TmaAsync SMEM pipeline.",
    "gemm": "GEMM-shaped load / mma / store skeleton (TmaUmma then UmmaAsync).",
    "gemm_persistent": "The GEMM skeleton, persistent over a static WorkQueue.",
}
