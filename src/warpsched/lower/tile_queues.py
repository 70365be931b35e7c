"""How a dynamic WorkQueue's stage gets its next tile: Blackwell's Cluster Launch Control, or on Hopper an
atomic counter in global memory.

Both fill one 16-byte response per stage and complete the stage's full barrier with one producer arrival
(``ClcFetchAsync``): CLC arms 16 transaction bytes at acquire that the hardware's write completes; a counter
queue's fetching thread arrives after its own store. The schedule and the barrier counts are the same; the
plan says where each arms (``protocol.plan``), and the fetch and the decoding differ.

- CLC (``TileSchedulerConfig.counter`` None, sm_100): ``clusterlaunchcontrol.try_cancel`` cancels a CTA
  not yet started and the hardware writes its coordinates; the first tile is the CTA's own block index and
  the loop ends when a response names none.
- Counter (``counter``: a one-word int32 tensor, zero before each launch): the fetching thread takes the
  counter's next value by an atomic add; tile ``gridDim.x + value`` (the first ``gridDim.x`` tiles are the
  CTAs' own block indices) is stored into the stage as ``{tile, 0, 0, tile < num_tiles}`` by a plain shared
  store, and the same thread then arrives on the stage's full barrier (``mbarrier.arrive``, release): the
  stage's one producer arrival, with no transaction bytes (``WorkQueue.counter_fed``: the plan places the
  arrival at the ``commit()`` that must follow the fetch directly, which emits nothing; the acquire only waits
  for the empty stage). Only a release arrival orders the store for the readers in a cluster of one CTA
  (docs/attention.md, "how the response reaches its stage", has the forms compute-sanitizer refused). Tiles
  are handed out in index order to whichever CTA asks first, so a CTA that drew short tiles takes more of them
  (what the hardware scheduler does for one CTA per tile, without a launch per tile)."""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

from ..protocol.barriers import CLC_RESPONSE_BYTES


def tile_dims(wq) -> tuple:
    """The queue's ``num_tiles`` as a tuple (an int or a device value is one dimension)."""
    dims = wq.tile_scheduler_config.num_tiles
    return dims if isinstance(dims, tuple) else (dims,)


def tile_total(wq):
    """The queue's tile count: ``num_tiles`` (an int, a device value or an (m, n, l) tuple), multiplied out."""
    dims = tile_dims(wq)
    total = dims[0]
    for d in dims[1:]:
        total = total * d
    return total


@dsl_user_op
def _require_cluster_launch(*, loc=None, ip=None):
    """Trap at once when the kernel was launched without a cluster shape (``%is_explicit_cluster`` false): the
    queue's cluster-scoped barrier ops address the cluster's shared memory and would fault later, part-way
    through a tile, as an illegal instruction. The host cannot see a launch the user writes; the device can.
    (A ``printf`` before the trap never reaches the host: the trap ends the context before its buffer is read.)"""
    llvm.inline_asm(res=None, operands_=[], asm_string="{\n\t.reg .pred p;\n\tmov.pred p, %is_explicit_cluster;"
                    "\n\t@!p trap;\n\t}", constraints="", has_side_effects=True,
                    asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip)


def first_tile(wq):
    """(x, y, z, valid) of the CTA's first tile: its own block index; with a counter valid only while it names a
    tile (a grid sized from a bound may have CTAs past the count), once the launch is known to have a cluster."""
    bx, by, bz = cute.arch.block_idx()
    valid = cutlass.Int32(1)
    if wq.counter_fed:
        _require_cluster_launch()
        valid = cutlass.Int32(cutlass.Int32(bx) < tile_total(wq))
    return cutlass.Int32(bx), cutlass.Int32(by), cutlass.Int32(bz), valid


def response(base, index):
    """The 16-byte response slot of stage ``index``."""
    return (base + index * CLC_RESPONSE_BYTES).align(min_align=CLC_RESPONSE_BYTES)


@dsl_user_op
def _store_response(resp, words, mbar, *, loc=None, ip=None):
    """Store the four response words into the stage's slot, then arrive on ``mbar`` (release at CTA scope: the
    readers' wait acquires the store)."""
    operands = [llvm.ptrtoint(T.i32(), p.to_llvm_ptr(loc=loc, ip=ip), loc=loc, ip=ip) for p in (resp, mbar)]
    operands += [cutlass.Int32(w).ir_value(loc=loc, ip=ip) for w in words]
    llvm.inline_asm(res=None, operands_=operands,
                    asm_string="st.shared.v4.b32 [$0], {$2, $3, $4, $5};\n\t"
                               "mbarrier.arrive.release.cta.shared::cta.b64 _, [$1];",
                    constraints="r,r,r,r,r,r,~{memory}", has_side_effects=True, asm_dialect=llvm.AsmDialect.AD_ATT,
                    loc=loc, ip=ip)


def fetch(wq, mbar, resp):
    """One elected thread asks for the next tile; the response lands in ``resp`` and completes ``mbar``."""
    with cute.arch.elect_one():
        if wq.counter_fed:
            counter = wq.tile_scheduler_config.counter
            drawn = cute.arch.atomic_add(counter.iterator.llvm_ptr, cutlass.Int32(1), sem="relaxed", scope="gpu")
            grid, _, _ = cute.arch.grid_dim()
            tile = cutlass.Int32(grid) + drawn
            valid = cutlass.Int32(tile < tile_total(wq))
            _store_response(resp, (tile, 0, 0, valid), mbar)
        else:
            cute.arch.issue_clc_query(mbar, resp)


def decode(wq, resp):
    """(x, y, z, valid) of a waited response. A CLC stage is written next by the async proxy (the next query, once
    the stage is released), so its reads are fenced against that; a counter's next response is a generic store."""
    if wq.counter_fed:
        words = cute.make_tensor(cute.recast_ptr(resp, dtype=cutlass.Int32), cute.make_layout(4))
        return words[0], words[1], words[2], words[3]
    tile = cute.arch.clc_response(resp)
    cute.arch.fence_proxy("async.shared", space="cta")
    return tile
