"""The persistent GEMM's configuration constants, its option types and its error type (no cutlass
import)."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Tuple

from .._device import H200_SMS  # noqa: F401 (gemm.kernel and the examples import it from here)


class GemmConfigError(ValueError):
    """An unsupported tile / schedule / dtype combination or tensor shape (raised on the host)."""


class Choice(str, enum.Enum):
    """A string option's allowed values, parsed once where the kernel is configured. A member is its
    value to Python (equal, hashed and printed as the string), so a caller's "cooperative" and
    ``Schedule.COOPERATIVE`` are interchangeable everywhere, keys of option dicts included."""

    __hash__ = str.__hash__

    def __str__(self):
        return self.value

    def __repr__(self):
        return repr(self.value)

    def __format__(self, spec):
        return format(self.value, spec)

    @classmethod
    def parse(cls, value, field: str, meaning: str = ""):
        """``value`` as a member; anything else raises GemmConfigError naming the field and its values."""
        try:
            return cls(value)
        except (ValueError, TypeError):
            raise GemmConfigError(f"{field}={value!r}: expected one of {[m.value for m in cls]}"
                                  + (f" ({meaning})" if meaning else "")) from None


class Schedule(Choice):
    COOPERATIVE = "cooperative"
    PINGPONG = "pingpong"
    PINGPONG_SHARED = "pingpong_shared"  # ping-pong over ONE ring that both math warp groups release


class SplitReduce(Choice):
    HOST = "host"  # fp32 slabs summed by torch
    SERIAL = "serial"  # in the kernel, ordered by per-tile GMEM flags (gemm.handover)
    PARALLEL = "parallel"
    ATOMIC = "atomic"


class Raster(Choice):
    M = "m"
    N = "n"


class EpiSync(Choice):
    PAIR = "pair"
    SINGLE = "single"


class AMajor(Choice):
    K = "k"  # row-major A
    M = "m"


class BMajor(Choice):
    K = "k"  # (N, K) row-major B, i.e. K-major
    N = "n"


SCHEDULES = tuple(m.value for m in Schedule)


@dataclass(frozen=True)
class GemmConfig:
    """What one PersistentGemm compiles from, resolved and validated (``PersistentGemm.config``): the
    defaults filled in (tile, ring depth, epilogue staging), string options as their enums, dtypes by
    name. Frozen: the kernel object carries trace-time state besides, this record does not change."""

    ab_dtype: str
    b_dtype: str
    c_dtype: str
    schedule: Schedule
    tile_mnk: Tuple[int, int, int]
    ab_stages: int
    rings: int
    k_tiles_min: int
    raster: Raster
    group: int
    cluster_mn: Tuple[int, int]
    split_k: bool
    split_reduce: SplitReduce
    stream_k: bool
    epi_n: int
    epi_sync: EpiSync
    epi_stages: int
    a_major: AMajor
    b_major: BMajor
    epilogue: str  # the fused epilogue, as EpilogueSpec.describe says it ("" for none)
    pdl: bool = False
    skip: bool = False
    batched: bool = False
    device_scale: bool = False
    gmem_flags: bool = False
    l2_hint: Optional[str] = None
# the cluster shapes a kernel launches (cm, cn): B multicast to the cm CTAs along M, A to the cn along N. Each
# CTA loads 1 / cm of the B tile and 1 / cn of the A tile and multicasts it; the empty barriers count the releases
# of every CTA that multicasts into them (cm + cn - 1, protocol.barriers.mcast_partners)
CLUSTERS = ((1, 1), (2, 1), (1, 2), (4, 1), (1, 4), (2, 2))


def cluster_of(cluster_mn):
    """``cluster_mn`` as a (cm, cn) tuple of ``CLUSTERS``, or a GemmConfigError naming them (a list, as JSON
    gives it, is taken)."""
    try:
        cluster = tuple(cluster_mn)
    except TypeError:
        cluster = None
    if cluster not in CLUSTERS:
        raise GemmConfigError(f"cluster_mn={cluster_mn!r}: clusters are (1, 1), (2, 1) or (4, 1) (B multicast to the "
                              "CTAs along M), (1, 2) or (1, 4) (A along N) or (2, 2) (both)")
    return cluster
DEFAULT_TILES = {"cooperative": (128, 256), "pingpong": (128, 128), "pingpong_shared": (128, 128)}


def tile_of(tile_mn, schedule):
    """``tile_mn`` as a (bM, bN) tuple (None: the schedule's default), or a GemmConfigError naming it."""
    tile = tile_mn or DEFAULT_TILES.get(schedule)
    if tile is None:
        raise GemmConfigError(f"schedule={schedule!r}: expected one of {list(DEFAULT_TILES)}")
    if not (isinstance(tile, (tuple, list)) and len(tile) == 2 and all(isinstance(x, int) for x in tile)):
        raise GemmConfigError(f"tile_mn={tile_mn!r}: expected two ints (bM, bN), e.g. (128, 256)")
    return tuple(tile)
# the deepest ring chosen by default for any K (tiles below 64x128 would fit more). With every stage the
# proof doubles while the checker lets each work tile's K loop end anywhere; a kernel that declares its K
# loop at least as long as its ring (PersistentGemm(k_tiles_min=...), which gemm.host.deep_ring sets to
# 12, 16 or the SMEM fit when K fills it) gets that ring, proven in about a thousand states
# (docs/proofs.md, "Deep rings")
MAX_AUTO_STAGES = 8



def check_stream_k(schedule, split_reduce, cluster_mn, split_k=None):
    """Stream-K's options (PersistentGemm(stream_k=True) and gemm(split_k="stream") both ask): the
    cooperative schedule, no cluster, no other K split, and no split_reduce (it hands a shared tile
    over in the kernel itself, gemm.streamk)."""
    if split_k or split_reduce != "host" or schedule != "cooperative" or tuple(cluster_mn) != (1, 1):
        raise GemmConfigError(f"stream-K with schedule={schedule!r}, split_reduce={split_reduce!r}, cluster_mn="
                              f"{tuple(cluster_mn)}" + (f", split_k={split_k!r}" if split_k else "") + ": stream-K "
                              "runs on the cooperative schedule without a cluster, splits K itself (not with split_k) "
                              "and hands its shared tiles over in the kernel (no split_reduce); drop the other options")
