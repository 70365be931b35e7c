"""Which programs tools/mutate.py mutates, and how each mutant is judged: the builder calls
whose verdicts decide it (TARGETS), module constants patched first (PATCHES), and the kernels
compiled on the CPU so the trace checks the TMA bytes (TRACED)."""
from __future__ import annotations

from typing import Dict, List, Tuple

BUNDLED = "src/warpsched/examples"
HOPPER = "examples/hopper"
PATTERNS = "examples/hopper/patterns"

# file -> the builder calls whose verdicts decide a mutant (a mutant is killed when any rejects it)
TARGETS: Dict[str, List[Tuple[str, dict]]] = {
    f"{BUNDLED}/grid_stride_copy.py": [("build", {})],
    f"{BUNDLED}/tma_copy.py": [("build", {})],
    f"{BUNDLED}/gemm.py": [("build", {})],
    f"{BUNDLED}/gemm_persistent.py": [("build", {})],
    f"{BUNDLED}/pingpong.py": [("build", {}), ("build", {"kind": "tma_async"}), ("build", {"kind": "umma_async"})],
    f"{BUNDLED}/split_consumer.py": [("build", {}), ("build_hopper", {}), ("build_hopper", {"split": False})],
    f"{BUNDLED}/interleaved.py": [("build_warp_lane", {}), ("build_warp_lane", {"kind": "tma_umma"}),
                                  ("build_domain_lane", {}), ("build_domain_lane", {"kind": "umma"}),
                                  ("build_per_role", {"num_stages": 4})],
    f"{BUNDLED}/leader_routed.py": [("build", {})],
    f"{HOPPER}/grid_stride_copy.py": [("build", {})],
    f"{HOPPER}/group_add.py": [("build", {"mode": "merge"}), ("build", {"mode": "fused"}), ("build", {"mode": "fork"})],
    f"{HOPPER}/interleaved_copy.py": [("build", {"mode": "warp"}), ("build", {"mode": "domain"})],
    f"{HOPPER}/persistent_copy.py": [("build", {})],
    f"{HOPPER}/relu_pipeline.py": [("build", {})],
    f"{HOPPER}/tma_copy.py": [("build", {}), ("build", {"store_lag": 0})],
    f"{HOPPER}/varlen_copy.py": [("build", {})],
    f"{HOPPER}/wgmma_gemm.py": [("build", {})],
    f"{PATTERNS}/pingpong.py": [("build", {"kind": "async_async"}), ("build", {"kind": "tma_async"})],
    f"{PATTERNS}/split_consumer.py": [("build", {}), ("build", {"cluster": True})],
    f"{PATTERNS}/leader_routed.py": [("build", {}), ("build", {"cluster": True})],
    f"{PATTERNS}/interleaved.py": [("build", {"mode": "warp_lane"}), ("build", {"mode": "domain_lane"}),
                                   ("build", {"mode": "per_role"})],
}
# module constants overridden before building (keeps each exhaustive search to a couple of seconds)
PATCHES: Dict[str, dict] = {f"{PATTERNS}/interleaved.py": {"STAGES": 4}}
# files whose kernels issue their TMA loads through StageInfo.tma_copy: a mutant the CPU checks
# accept is also compiled (sm_90a, fake tensors) with these compile_for_cpu arguments, and the trace
# checks the bytes its copies deliver against what each acquire arms
TRACED: Dict[str, List[dict]] = {
    f"{HOPPER}/wgmma_gemm.py": [{}, {"cluster_mn": (2, 1)}],
    f"{HOPPER}/tma_copy.py": [{}],
    f"{HOPPER}/group_add.py": [{"mode": "merge"}, {"mode": "fused"}, {"mode": "fork"}],
    f"{PATTERNS}/pingpong.py": [{"kind": "tma_async"}],
    f"{PATTERNS}/split_consumer.py": [{}, {"cluster": True}],
    f"{PATTERNS}/interleaved.py": [{"mode": "warp_lane"}, {"mode": "domain_lane"}, {"mode": "per_role"}],
}
