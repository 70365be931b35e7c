"""The one description of each pipeline type's barrier protocol.

Static checks derive expected arrival counts and bytes from it, the exhaustive checker
executes it, and the lowering emits it (through ``cutlass.pipeline``). Pure Python.
"""
from .barriers import (ARRIVE_KIND, ArriveKind, PipelineProtocol, SideCount, expected_group_size,
                       expected_num_bytes, mcast_partners, protocol_of, signaling_ctas, signaling_warps)

__all__ = ["ARRIVE_KIND", "ArriveKind", "PipelineProtocol", "SideCount", "expected_group_size",
           "expected_num_bytes", "mcast_partners", "protocol_of", "signaling_ctas", "signaling_warps"]
