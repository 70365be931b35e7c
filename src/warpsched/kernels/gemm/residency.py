"""Launch-time co-residency of grids whose CTAs wait for each other (no cutlass import).

Serial split-K and stream-K hand tiles between CTAs through GMEM flags (``kernels/gemm/handover``),
and a reader may wait for a CTA with a higher index (``verify/checker/grid.needs_residency``). The
grid checker proves those hand-overs assuming every CTA of the grid is resident at once; on a device
that runs fewer at once, the waiting CTAs hold the SMs their writers need and the launch hangs. So
before such a launch the host compares the grid with what the device holds at once: its SM count
(less under an MPS thread-percentage limit), times the CTAs of this kernel one SM holds for their
shared memory and threads (or the active clusters, for clustered kernels). A grid that does not fit
is refused with ``CoResidencyError`` instead of launched.

What is not seen from here: other kernels running concurrently on the device keep SMs busy only
until they finish, which delays but does not deadlock these grids, except another grid that itself
waits for co-residency (two such grids on two streams can each hold SMs the other needs): launch
them on one stream.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from .config import GemmConfigError

SMEM_RESERVED_PER_CTA = 1024  # bytes the hardware keeps per resident CTA (sm_80 and later)
MPS_PERCENT_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"


class CoResidencyError(GemmConfigError):
    """A grid whose CTAs wait for each other is larger than what the device holds at once."""


@dataclass(frozen=True)
class DeviceOccupancy:
    """What one device offers a grid at once: its SMs (after an MPS limit), each SM's shared memory
    and threads, and how many clusters of a size can be active (None: cluster size 1 only known)."""

    name: str
    sms: int
    smem_per_sm: int
    threads_per_sm: int
    mps_percent: Optional[int] = None
    max_blocks_per_sm: int = 32

    @property
    def usable_sms(self) -> int:
        if self.mps_percent is None:
            return self.sms
        return max(1, self.sms * self.mps_percent // 100)

    def ctas_per_sm(self, smem_per_cta: int, threads: int) -> int:
        by_smem = self.smem_per_sm // (smem_per_cta + SMEM_RESERVED_PER_CTA)
        by_threads = self.threads_per_sm // threads
        return max(0, min(by_smem, by_threads, self.max_blocks_per_sm))

    def ctas_at_once(self, smem_per_cta: int, threads: int) -> int:
        return self.usable_sms * self.ctas_per_sm(smem_per_cta, threads)

    def explain(self, smem_per_cta: int, threads: int) -> str:
        sms = (f"{self.usable_sms} of its {self.sms} SMs ({MPS_PERCENT_ENV}={self.mps_percent})"
               if self.mps_percent is not None else f"{self.sms} SMs")
        return (f"{self.name} holds {self.ctas_at_once(smem_per_cta, threads)} of these CTAs at once: {sms} x "
                f"{self.ctas_per_sm(smem_per_cta, threads)} per SM ({smem_per_cta // 1024} KB of shared memory and "
                f"{threads} threads each; an SM has {self.smem_per_sm // 1024} KB and {self.threads_per_sm} threads)")


def mps_percent() -> Optional[int]:
    """The MPS active-thread percentage this process runs under, or None (not set, or not 1..99)."""
    raw = os.environ.get(MPS_PERCENT_ENV, "").strip()
    try:
        pct = int(float(raw))
    except ValueError:
        return None
    return pct if 0 < pct < 100 else None


def device_occupancy(device=None) -> DeviceOccupancy:
    """The occupancy facts of a CUDA device (torch's device properties; the current device for None)."""
    import torch

    props = torch.cuda.get_device_properties(device)  # None: the current device
    return DeviceOccupancy(name=props.name, sms=props.multi_processor_count,
                           smem_per_sm=getattr(props, "shared_memory_per_multiprocessor", 233472),
                           threads_per_sm=getattr(props, "max_threads_per_multi_processor", 2048),
                           mps_percent=mps_percent())


def resident_bound(occ: DeviceOccupancy, smem_per_cta: int, threads: int, cluster_size: int = 1,
                   active_clusters: Optional[int] = None) -> int:
    """The most CTAs of this kernel resident at once: whole clusters only (``active_clusters`` from
    the driver for a clustered kernel, else every usable SM's CTAs grouped into clusters)."""
    ctas = occ.ctas_at_once(smem_per_cta, threads)
    if cluster_size > 1:
        clusters = ctas // cluster_size
        if active_clusters is not None:
            clusters = min(clusters, active_clusters)
        ctas = clusters * cluster_size
    return ctas


def check_coresident(what: str, grid: int, occ: DeviceOccupancy, smem_per_cta: int, threads: int,
                     bound: int, fix: str) -> None:
    """Refuse a launch of ``grid`` CTAs that wait for each other when only ``bound`` fit at once."""
    if grid > bound:
        raise CoResidencyError(
            f"{what}: its {grid} CTAs wait for each other through GMEM flags, so all of them must be resident at "
            f"once, and {occ.explain(smem_per_cta, threads)}" + (f", {bound} in whole clusters" if bound !=
                                                                 occ.ctas_at_once(smem_per_cta, threads) else "")
            + f"; launching it could hang. Fix: {fix}")
