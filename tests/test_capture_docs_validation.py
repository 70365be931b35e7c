"""The accepted/fixed examples of the ts_validation page, and the rejected ones that still capture, IR asserted.

Each snippet is written as the page writes it; resource classes (here and in ``_capture_docs_support``)
supply the work methods the snippet calls. Values the page leaves to the kernel (``num_k_tiles`` ...) are the
support module's constants. Line expectations look up this file, where the schedules live.
"""
from __future__ import annotations

from dataclasses import dataclass

from warpsched import (MemoryResource, PdlLaunchBarrier, PdlWaitBarrier, TaskLocalVariable, WorkQueue, consumer_work,
                       domain_loop, producer_work, schedule, work_tile_loop)
from warpsched.model.ir import StepKind as K

from _capture_docs_support import (H, L, T, CopyResource, GmemAbResource, GmemAResource, OutputGmemResource,
                                   OversubscribedCopyWorkQueue, SmemAResource, TmemCResource, ValSrc, assert_sources,
                                   cfg, num_entries, num_k_tiles, num_rows, packet_count, shape)


# ================================================================== ts_validation (accepted / fixed forms)
@schedule
def validation_copy_schedule(src: ValSrc, dst: OutputGmemResource) -> None:
    with domain_loop(0, num_entries, 1):
        value = src.load()
        dst.store(value=value)


@schedule
def validation_load_schedule(gmem_a: GmemAResource, smem_a: SmemAResource) -> None:
    with domain_loop(0, num_k_tiles, 1):
        coord_k, coord_m, coord_n = gmem_a.compute_coords()
        smem_a.try_acquire()
        smem_a.acquire()
        smem_a.tma_load_a(coord_k=coord_k, coord_m=coord_m)
        smem_a.commit()


@schedule
def validation_mma_schedule(smem_a: SmemAResource, tmem_c: TmemCResource) -> None:
    with domain_loop(0, num_k_tiles, 1):
        smem_a.wait()
        desc_a = smem_a.build_desc()
        tmem_c.acquire()
        tmem_c.mma(desc_a=desc_a)
        smem_a.release()                  # release after the MMA read
        tmem_c.commit()


@schedule
def validation_skip_copy_schedule(copy_res: CopyResource, wq: WorkQueue) -> None:
    with work_tile_loop(wq, skip_if=OversubscribedCopyWorkQueue.skip_work_tile_if) as wtwl:
        with wtwl.skippable(), domain_loop(0, num_rows, 1):
            copy_res.copy_row()
        wq.try_wait()                     # tail: runs once per work tile
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()


@schedule
def pdl_load_schedule(gmem_ab, smem_a, pdl_wait_resource, pdl_launch_resource) -> None:
    pdl_wait_resource.wait_griddep()
    with domain_loop(0, num_k_tiles, 1):
        coord_k, coord_m, coord_n = gmem_ab.compute_coords()
        smem_a.acquire()
        smem_a.tma_load_a(coord_k=coord_k, coord_m=coord_m)
        smem_a.commit()
    pdl_launch_resource.launch_griddep()


@dataclass(kw_only=True)
class PacketResource(MemoryResource):
    header: object = TaskLocalVariable.uninitialized()
    payload: object = TaskLocalVariable.uninitialized()

    @consumer_work(returns=header)
    def load_header(self, stage_info): ...

    @consumer_work(returns=payload)
    def load_payload(self, stage_info): ...

    @producer_work
    def store_header(self, stage_info, header): ...

    @producer_work
    def store_payload(self, stage_info, payload=None, token=None): ...


@schedule
def named_work_schedule(src: PacketResource, dst: PacketResource) -> None:
    with domain_loop(0, packet_count, 1):
        header = src.load_header()
        payload = src.load_payload()
        dst.store_header(header=header)
        dst.store_payload(payload=payload)


@schedule
def routed_schedule(src: PacketResource, dst: PacketResource) -> None:
    with domain_loop(0, packet_count, 1):
        token = src.load_payload()
        dst.store_payload(token=token)


@dataclass(kw_only=True)
class TmemResource(MemoryResource):
    @producer_work
    def produce_tile(self, stage_info): ...

    @consumer_work
    def consume_tile(self, stage_info): ...


@schedule
def tmem_producer_schedule(tmem_a: TmemResource) -> None:
    with domain_loop(0, num_k_tiles, 1):
        tmem_a.acquire()
        tmem_a.produce_tile()
        tmem_a.commit()


@schedule
def tmem_consumer_schedule(tmem_b: TmemResource) -> None:
    with domain_loop(0, num_k_tiles, 1):
        tmem_b.wait()
        tmem_b.consume_tile()
        tmem_b.release()


def test_validation_fixed_examples():
    r = validation_copy_schedule(ValSrc(name="src"), OutputGmemResource(name="dst"))
    assert r.steps[1].token_args == {"value": r.steps[0].returns[0]}

    gmem_a, smem_a = GmemAResource(name="gmem_a"), SmemAResource(name="smem_a", pipeline_config=cfg())
    r = validation_load_schedule(gmem_a, smem_a)
    assert [s.kind for s in r.steps] == [K.ConsumerWork, K.ProducerTryAcquire, K.ProducerAcquire, K.ProducerWork,
                                         K.ProducerCommit]

    tmem_c = TmemCResource(name="tmem_c", pipeline_config=cfg())
    r = validation_mma_schedule(smem_a, tmem_c)
    assert [(s.resource_name, s.method) for s in r.steps] == [
        ("smem_a", "wait"), ("smem_a", "build_desc"), ("tmem_c", "acquire"), ("tmem_c", "mma"),
        ("smem_a", "release"), ("tmem_c", "commit")]
    assert r.steps[3].token_args == {"desc_a": r.steps[1].returns[0]}
    assert_sources(r, __file__)

    r = validation_skip_copy_schedule(CopyResource(name="copy"), OversubscribedCopyWorkQueue(name="wq"))
    assert shape(r)[0] == ("copy", "copy_row", K.ProducerWork, L, ("skippable",))
    assert [s.section for s in r.steps[1:]] == [T] * 4 and all(not s.guards for s in r.steps[1:])

    r = pdl_load_schedule(GmemAbResource(name="gmem_ab"), smem_a, PdlWaitBarrier(name="w"), PdlLaunchBarrier(name="l"))
    assert (r.steps[0].kind, r.steps[0].section) == (K.PdlWait, H)
    assert (r.steps[-1].kind, r.steps[-1].section) == (K.PdlLaunch, T)

    src, dst = PacketResource(name="src"), PacketResource(name="dst")
    r = named_work_schedule(src, dst)
    assert [s.method for s in r.steps] == ["load_header", "load_payload", "store_header", "store_payload"]
    assert r.steps[2].token_args["header"].slot == "header" and r.steps[3].token_args["payload"].slot == "payload"
    r = routed_schedule(src, dst)
    assert r.steps[1].token_args == {"token": r.steps[0].returns[0]} and r.steps[0].kind is K.ConsumerWork
    assert r.steps[1].kind is K.ProducerWork

    a, b = TmemResource(name="tmem_a", pipeline_config=cfg()), TmemResource(name="tmem_b", pipeline_config=cfg())
    assert [s.kind for s in tmem_producer_schedule(a).steps] == [K.ProducerAcquire, K.ProducerWork, K.ProducerCommit]
    assert [s.kind for s in tmem_consumer_schedule(b).steps] == [K.ConsumerWait, K.ConsumerWork, K.ConsumerRelease]


# Rejected examples of ts_validation that are still capturable: the IR keeps what the checks need.
@schedule
def bad_domain_schedule(src) -> None:
    with domain_loop(0, num_entries, 0):
        src.load()


@schedule
def bad_load_schedule(gmem_a, smem_a) -> None:
    with domain_loop(0, num_k_tiles, 1):
        coord_k, coord_m, coord_n = gmem_a.compute_coords()
        smem_a.tma_load_a(coord_k=coord_k, coord_m=coord_m)   # work before acquire
        smem_a.acquire()
        smem_a.commit()


@schedule
def bad_skip_schedule(copy_res, wq) -> None:
    with work_tile_loop(wq, skip_if=OversubscribedCopyWorkQueue.skip_work_tile_if) as wtwl:
        with wtwl.skippable(), domain_loop(0, num_rows, 1):
            copy_res.copy_row()
            wq.try_wait()
            wq.wait()
            wq.get_and_advance_work_tile()
            wq.release()


@schedule
def bad_pdl_launch_schedule(pdl_launch_resource) -> None:
    with domain_loop(0, 1, 1):
        pdl_launch_resource.launch_griddep()


def test_validation_rejected_examples_capture_for_the_checks():
    d = bad_domain_schedule(ValSrc(name="src")).domain_loop
    assert d.step == 0 and d.trip_count is None  # the domain-validity check sees the zero step
    smem_a = SmemAResource(name="smem_a", pipeline_config=cfg())
    r = bad_load_schedule(GmemAResource(name="gmem_a"), smem_a)
    assert [s.kind for s in r.steps][1:3] == [K.ProducerWork, K.ProducerAcquire]
    r = bad_skip_schedule(CopyResource(name="copy"), OversubscribedCopyWorkQueue(name="wq"))
    assert all(s.section is L and s.guard_kinds() == ("skippable",) for s in r.steps)
    r = bad_pdl_launch_schedule(PdlLaunchBarrier(name="l"))
    assert shape(r) == [("l", "launch_griddep", K.PdlLaunch, L, ())] and r.domain_loop.trip_count == 1
