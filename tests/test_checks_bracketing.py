"""Work bracketing (incl. try-before-blocking), DMA ordering and value routing."""
from __future__ import annotations

import pytest

from warpsched import PipelineConfig, ScheduleError, Task, domain_loop, schedule, when_true

from test_checks_support import Buf, Gmem, accepted, cg, expect, line, rejected

K = 4


def tma_umma(**kw):
    return PipelineConfig.create_tma_umma_pipeline_cfg(num_stages=2, num_bytes=1024, producer_group=cg(1),
                                                      consumer_group=cg(1), cta_layout_vmnk=(1, 1, 1, 1), **kw)


def umma_async(warps=1):
    return PipelineConfig.create_umma_async_pipeline_cfg(num_stages=2, producer_group=cg(1),
                                                        consumer_group=cg(32 * warps), cta_layout_vmnk=(1, 1, 1, 1))


def async_async(p=32, c=32, **kw):
    return PipelineConfig.create_async_async_pipeline_cfg(num_stages=2, producer_group=cg(p), consumer_group=cg(c),
                                                         **kw)


def load_task(gmem_a, smem_a, sched):
    return Task(name="load_a", src_resources=[gmem_a], dst_resources=[smem_a], warp_idx=0, num_warps=1,
                schedule=sched(gmem_a, smem_a))


def consumer_task(smem_a, out, warp=1):
    @schedule
    def drain(smem_a, out):
        with domain_loop(0, K, 1):
            smem_a.wait()
            v = smem_a.read()
            out.store(value=v)
            smem_a.release()

    return Task(name="drain", src_resources=[smem_a], dst_resources=[out], warp_idx=warp, num_warps=1,
                schedule=drain(smem_a, out))


# ------------------------------------------------------------------ the doc's bracketing pair
@schedule
def bad_load_schedule(gmem_a, smem_a):
    with domain_loop(0, K, 1):
        coords = gmem_a.compute_coords()
        smem_a.tma_load_a(coord_k=coords, coord_m=coords)  # @work_before_acquire
        smem_a.acquire()
        smem_a.commit()


@schedule
def good_load_schedule(gmem_a, smem_a):
    with domain_loop(0, K, 1):
        coords = gmem_a.compute_coords()
        smem_a.acquire()
        smem_a.tma_load_a(coord_k=coords, coord_m=coords)
        smem_a.commit()


def _tma_async():
    return PipelineConfig.create_tma_async_pipeline_cfg(num_stages=2, num_bytes=1024, producer_group=cg(1),
                                                       consumer_group=cg(1))


def test_producer_work_before_acquire_doc_pair():
    gmem_a, smem_a, out = Gmem(name="gmem_a"), Buf(name="smem_a", pipeline_config=_tma_async()), Gmem(name="out")
    graph = {smem_a: [gmem_a], out: [smem_a]}
    f = rejected([load_task(gmem_a, smem_a, bad_load_schedule), consumer_task(smem_a, out)], graph)
    hit = expect(f, "work bracketing", "load_a", "smem_a", line("work_before_acquire"))
    assert "outside an acquire()/commit() bracket" in hit.message
    accepted([load_task(gmem_a, smem_a, good_load_schedule), consumer_task(smem_a, out)], graph)


def test_commit_without_acquire_and_unreleased_wait():
    gmem_a, smem_a, out = Gmem(name="gmem_a"), Buf(name="smem_a", pipeline_config=_tma_async()), Gmem(name="out")

    @schedule
    def no_acquire(gmem_a, smem_a):
        with domain_loop(0, K, 1):
            c = gmem_a.compute_coords()
            smem_a.tma_load_a(coord_k=c)
            smem_a.commit()  # @commit_alone

    @schedule
    def no_release(smem_a, out):
        with domain_loop(0, K, 1):
            smem_a.wait()  # @wait_alone
            v = smem_a.read()
            out.store(value=v)

    drain = Task(name="drain", src_resources=[smem_a], dst_resources=[out], warp_idx=1,
                 schedule=no_release(smem_a, out))
    f = rejected([load_task(gmem_a, smem_a, no_acquire), drain], {smem_a: [gmem_a], out: [smem_a]})
    expect(f, "work bracketing", "load_a", "smem_a", line("commit_alone"))
    expect(f, "work bracketing", "drain", "smem_a", line("wait_alone"))


def test_bracket_spanning_the_loop_is_accepted():
    """The GEMM accumulator: acquire in the head, MMAs in the loop, commit in the tail."""
    smem, tmem, out = Buf(name="smem", pipeline_config=async_async()), Buf(name="tmem", pipeline_config=umma_async()), \
        Gmem(name="out")
    gmem = Gmem(name="gmem")

    @schedule
    def load(gmem, smem):
        with domain_loop(0, K, 1):
            smem.acquire()
            v = gmem.load()
            smem.produce_tile(value=v)
            smem.commit()

    @schedule
    def mma(smem, tmem):
        tmem.acquire()
        with domain_loop(0, K, 1):
            smem.wait()
            d = smem.aux_desc()
            tmem.mma(desc_a=d)
            smem.release()
        tmem.commit()

    @schedule
    def store(tmem, out):
        tmem.wait()
        v = tmem.read()
        out.store(value=v)
        tmem.release()

    tasks = [Task(name="load", src_resources=[gmem], dst_resources=[smem], warp_idx=0, schedule=load(gmem, smem)),
             Task(name="mma", src_resources=[smem], dst_resources=[tmem], warp_idx=1, schedule=mma(smem, tmem)),
             Task(name="store", src_resources=[tmem], dst_resources=[out], warp_idx=2, schedule=store(tmem, out))]
    accepted(tasks, {smem: [gmem], tmem: [smem], out: [tmem]})


def test_sync_verb_on_unpipelined_resource():
    src, out = Gmem(name="src"), Gmem(name="out")

    @schedule
    def bad(src, out):
        with domain_loop(0, K, 1):
            src.wait()  # @unpiped_wait
            v = src.load()
            out.store(value=v)

    f = rejected([Task(name="copy", src_resources=[src], dst_resources=[out], schedule=bad(src, out))], {out: [src]})
    expect(f, "work bracketing", "copy", "src", line("unpiped_wait"))


# ------------------------------------------------------------------ try_ before blocking
def _try_program(sched):
    gmem_a, smem_a, out = Gmem(name="gmem_a"), Buf(name="smem_a", pipeline_config=_tma_async()), Gmem(name="out")
    return [load_task(gmem_a, smem_a, sched), consumer_task(smem_a, out)], {smem_a: [gmem_a], out: [smem_a]}


def test_try_acquire_must_feed_the_next_call_on_its_resource():
    """The probe's next call on the same resource must be its blocking verb; calls on other resources
    may sit between (issue 27: the TS tutorials batch probes)."""
    @schedule
    def try_far(gmem_a, smem_a):
        with domain_loop(0, K, 1):
            smem_a.try_acquire()
            c = gmem_a.compute_coords()  # another resource: the probe still feeds the acquire
            smem_a.acquire()
            smem_a.tma_load_a(coord_k=c)
            smem_a.commit()

    @schedule
    def try_after(gmem_a, smem_a):
        with domain_loop(0, K, 1):
            c = gmem_a.compute_coords()
            smem_a.acquire()
            smem_a.try_acquire()  # @try_after
            smem_a.tma_load_a(coord_k=c)
            smem_a.commit()

    @schedule
    def try_adjacent(gmem_a, smem_a):
        with domain_loop(0, K, 1):
            c = gmem_a.compute_coords()
            smem_a.try_acquire()
            smem_a.acquire()
            smem_a.tma_load_a(coord_k=c)
            smem_a.commit()

    assert not accepted(*_try_program(try_far)).result.warnings
    f = rejected(*_try_program(try_after))
    expect(f, "work bracketing", "load_a", "smem_a", line("try_after"))
    accepted(*_try_program(try_adjacent))


def test_try_token_is_consumed_only_by_its_own_blocking_call():
    """A try_ result feeds the blocking call right after it in the same iteration; placements that
    cannot reach it (head -> loop, unrelated guards) are wasted probes: warnings, not errors (the
    reference TS accepts them; see docs/porting.md)."""
    @schedule
    def guarded_blocking(gmem_a, smem_a):  # fewer guards on the try: consumed whenever acquire runs
        with domain_loop(0, K, 1) as d:
            c = gmem_a.compute_coords()
            smem_a.try_acquire()
            with d.every(1):
                smem_a.acquire()
                smem_a.tma_load_a(coord_k=c)
                smem_a.commit()

    @schedule
    def documented_first_iter_try(gmem_a, smem_a):
        with domain_loop(0, K, 1) as d:
            c = gmem_a.compute_coords()
            with d.first_iter():
                smem_a.try_acquire()
            smem_a.acquire()  # later iterations still block here
            smem_a.tma_load_a(coord_k=c)
            smem_a.commit()

    @schedule
    def head_try(gmem_a, smem_a):
        smem_a.try_acquire()  # @head_try
        with domain_loop(0, K, 1):
            smem_a.acquire()
            c = gmem_a.compute_coords()
            smem_a.tma_load_a(coord_k=c)
            smem_a.commit()

    @schedule
    def unrelated_guards(gmem_a, smem_a):
        with domain_loop(0, K, 1) as d:
            c = gmem_a.compute_coords()
            with d.every(2):
                smem_a.try_acquire()  # @unrelated_try
            with d.first_iter():
                smem_a.acquire()
                smem_a.tma_load_a(coord_k=c)
                smem_a.commit()

    assert not accepted(*_try_program(guarded_blocking)).result.warnings
    assert not accepted(*_try_program(documented_first_iter_try)).result.warnings
    m = accepted(*_try_program(head_try))
    hit = expect(m.result.warnings, "work bracketing", "load_a", "smem_a", line("head_try"), severity="warning")
    assert "head" in hit.message and "always blocks" in hit.message
    m = accepted(*_try_program(unrelated_guards))
    hit = expect(m.result.warnings, "work bracketing", "load_a", "smem_a", line("unrelated_try"), severity="warning")
    assert "unrelated guards" in hit.message


# ------------------------------------------------------------------ split consumer (seed)
def split_program(mma_waits_proxy=True, sync_waits=True):
    gmem_a, gmem_b = Gmem(name="gmem_a"), Gmem(name="gmem_b")
    smem_a, smem_b = Buf(name="smem_a", pipeline_config=tma_umma()), Buf(name="smem_b", pipeline_config=tma_umma())
    proxy = Buf(name="proxy", pipeline_config=async_async(32, 32))
    tmem_c = Buf(name="tmem_c")

    @schedule
    def load(gmem_a, gmem_b, smem_a, smem_b):
        with domain_loop(0, K, 1):
            ca = gmem_a.compute_coords()
            cb = gmem_b.compute_coords()
            smem_a.acquire()
            smem_a.tma_load_a(coord_k=ca)
            smem_a.commit()
            smem_b.acquire()
            smem_b.tma_load_a(coord_k=cb)
            smem_b.commit()

    @schedule
    def sync_schedule(smem_a, smem_b, proxy):
        with domain_loop(0, K, 1):
            if sync_waits:
                smem_a.wait()
                smem_b.wait()
            proxy.acquire()
            proxy.signal_ready()
            proxy.commit()

    @schedule
    def mma_schedule(proxy, smem_a, smem_b, tmem_c):
        with domain_loop(0, K, 1):
            if mma_waits_proxy:
                proxy.wait()
            desc_a = smem_a.build_desc()  # @split_work
            desc_b = smem_b.build_desc()
            tmem_c.mma(desc_a=desc_a, desc_b=desc_b)
            smem_a.release()  # @split_release
            smem_b.release()
            if mma_waits_proxy:
                proxy.release()

    tasks = [Task(name="load", src_resources=[gmem_a, gmem_b], dst_resources=[smem_a, smem_b], warp_idx=0,
                  schedule=load(gmem_a, gmem_b, smem_a, smem_b)),
             Task(name="sync", src_resources=[smem_a, smem_b], dst_resources=[proxy], warp_idx=1,
                  schedule=sync_schedule(smem_a, smem_b, proxy)),
             Task(name="mma", src_resources=[proxy, smem_a, smem_b] if mma_waits_proxy else [smem_a, smem_b],
                  dst_resources=[tmem_c], warp_idx=2, schedule=mma_schedule(proxy, smem_a, smem_b, tmem_c))]
    graph = {smem_a: [gmem_a], smem_b: [gmem_b], proxy: [smem_a, smem_b],
             tmem_c: [proxy] if mma_waits_proxy else [smem_a, smem_b]}
    return tasks, graph


def test_split_consumer_seed_accepted_and_needs_the_proxy_wait():
    accepted(*split_program())
    f = rejected(*split_program(mma_waits_proxy=False))
    expect(f, "work bracketing", "mma", "smem_a", line("split_work"))
    expect(f, "work bracketing", "mma", "smem_a", line("split_release"))


def test_split_release_needs_some_task_to_wait():
    f = rejected(*split_program(sync_waits=False))
    expect(f, "work bracketing", "mma", "smem_a", line("split_release"))


# ------------------------------------------------------------------ DMA ordering (doc pair)
def dma_program(sched, down_cfg):
    gmem_a = Gmem(name="gmem_a")
    smem_a = Buf(name="smem_a", pipeline_config=tma_umma())
    tmem_c = Buf(name="tmem_c", pipeline_config=down_cfg)
    out = Gmem(name="out")

    @schedule
    def load(gmem_a, smem_a):
        with domain_loop(0, K, 1):
            c = gmem_a.compute_coords()
            smem_a.acquire()
            smem_a.tma_load_a(coord_k=c)
            smem_a.commit()

    @schedule
    def drain(tmem_c, out):
        with domain_loop(0, K, 1):
            tmem_c.wait()
            v = tmem_c.read()
            out.store(value=v)
            tmem_c.release()

    tasks = [Task(name="load", src_resources=[gmem_a], dst_resources=[smem_a], warp_idx=0,
                  schedule=load(gmem_a, smem_a)),
             Task(name="mma", src_resources=[smem_a], dst_resources=[tmem_c], warp_idx=1,
                  schedule=sched(smem_a, tmem_c)),
             Task(name="drain", src_resources=[tmem_c], dst_resources=[out], warp_idx=2, schedule=drain(tmem_c, out))]
    return tasks, {smem_a: [gmem_a], tmem_c: [smem_a], out: [tmem_c]}


@schedule
def bad_dma_order_schedule(smem_a, tmem_c):
    with domain_loop(0, K, 1):
        smem_a.wait()
        desc_a = smem_a.build_desc()
        smem_a.release()  # @early_release
        tmem_c.acquire()
        tmem_c.mma(desc_a=desc_a)
        tmem_c.commit()


@schedule
def mma_schedule(smem_a, tmem_c):
    with domain_loop(0, K, 1):
        smem_a.wait()
        desc_a = smem_a.build_desc()
        tmem_c.acquire()
        tmem_c.mma(desc_a=desc_a)
        smem_a.release()
        tmem_c.commit()


def test_dma_ordering_doc_pair():
    f = rejected(*dma_program(bad_dma_order_schedule, umma_async()))
    hit = expect(f, "dma ordering", "mma", "smem_a", line("early_release"))
    assert "UmmaAsync producer" in hit.message
    accepted(*dma_program(mma_schedule, umma_async()))


def test_early_release_before_a_plain_downstream_is_not_dma_ordering():
    """An async-thread downstream producer is not a DMA producer, so DMA ordering does not apply; but
    its work takes the descriptor build_desc() returned (smem_a's stage index) after smem_a's release,
    so it reads a stage that may already be refilled (issue 17: a stage reference used late)."""
    f = rejected(*dma_program(bad_dma_order_schedule, async_async(32, 32)))
    assert not [x for x in f if x.check == "dma ordering"]
    hit = [x for x in f if "after smem_a's stage was released" in x.message]
    assert hit and hit[0].task == "mma" and "tmem_c.mma" in hit[0].message


# ------------------------------------------------------------------ value routing
def test_value_routed_backwards_is_rejected():
    src, dst, out = Gmem(name="src"), Buf(name="dst", pipeline_config=async_async()), Gmem(name="out")
    mid = Buf(name="mid", pipeline_config=async_async())

    @schedule
    def backwards(src, dst, mid):
        with domain_loop(0, K, 1):
            src.load()
            dst.acquire()
            r = dst.produce_and_report()
            dst.commit()
            mid.wait()
            mid.read(value=r)  # @backwards
            mid.release()

    @schedule
    def forwards(src, dst, mid):
        with domain_loop(0, K, 1):
            mid.wait()
            v = mid.read()
            mid.release()
            dst.acquire()
            dst.produce_tile(value=v)
            dst.commit()
            src.load()

    @schedule
    def fill_mid(src, mid):
        with domain_loop(0, K, 1):
            mid.acquire()
            v = src.load()
            mid.produce_tile(value=v)
            mid.commit()

    def build(sched):
        return ([Task(name="route", src_resources=[src, mid], dst_resources=[dst], warp_idx=0,
                      schedule=sched(src, dst, mid)),
                 Task(name="fill", src_resources=[src], dst_resources=[mid], warp_idx=1, schedule=fill_mid(src, mid)),
                 consumer_task(dst, out, warp=2)],
                {mid: [src], dst: [mid, src], out: [dst]})

    f = rejected(*build(backwards))
    expect(f, "value routing", "route", "mid", line("backwards"))
    accepted(*build(forwards))


def test_reader_must_take_the_most_recent_write_and_name_a_parameter():
    src, out = Gmem(name="src"), Gmem(name="out")

    @schedule
    def stale(src, out):
        with domain_loop(0, K, 1):
            first = src.load()
            src.load()
            out.store(value=first)  # @stale_read

    @schedule
    def unknown_param(src, out):
        with domain_loop(0, K, 1):
            v = src.load()
            out.store(valu=v)  # @typo_param

    @schedule
    def fresh(src, out):
        with domain_loop(0, K, 1):
            src.load()
            latest = src.load()
            out.store(value=latest)

    def build(sched):
        return [Task(name="copy", src_resources=[src], dst_resources=[out], schedule=sched(src, out))], {out: [src]}

    expect(rejected(*build(stale)), "value routing", "copy", "out", line("stale_read"))
    expect(rejected(*build(unknown_param)), "value routing", "copy", "out", line("typo_param"))
    accepted(*build(fresh))


def test_value_written_under_a_condition_read_unconditionally():
    src, smem, out = Gmem(name="src"), Buf(name="smem", pipeline_config=async_async()), Gmem(name="out")

    @schedule
    def cond_writer(src, smem):
        with domain_loop(0, K, 1):
            smem.acquire()
            flag = smem.needs_epilogue()
            with when_true(flag):
                v = src.load()
            smem.produce_tile(value=v)  # @cond_read
            smem.commit()

    @schedule
    def cond_both(src, smem):
        with domain_loop(0, K, 1):
            smem.acquire()
            flag = smem.needs_epilogue()
            with when_true(flag):
                v = src.load()
                smem.produce_tile(value=v)
            smem.commit()

    def build(sched):
        return ([Task(name="fill", src_resources=[src], dst_resources=[smem], schedule=sched(src, smem)),
                 consumer_task(smem, out)], {smem: [src], out: [smem]})

    expect(rejected(*build(cond_writer)), "value routing", "fill", "smem", line("cond_read"))
    accepted(*build(cond_both))


def test_guard_must_read_the_most_recent_write():
    """A when_true reads its token's slot where the block opens: a second write of the slot
    in between makes the handle stale (found by tools/diff_fuzz.py: TS rejects it,
    warpsched accepted it while rejecting the same staleness on a work argument)."""
    src, smem, out = Gmem(name="src"), Buf(name="smem", pipeline_config=async_async()), Gmem(name="out")

    @schedule
    def stale(src, smem):
        with domain_loop(0, K, 1):
            smem.acquire()
            flag = smem.needs_epilogue()
            smem.needs_epilogue()
            with when_true(flag):  # @stale_guard
                v = src.load()
                smem.produce_tile(value=v)
            smem.commit()

    @schedule
    def fresh(src, smem):
        with domain_loop(0, K, 1):
            smem.acquire()
            smem.needs_epilogue()
            flag = smem.needs_epilogue()
            with when_true(flag):
                v = src.load()
                smem.produce_tile(value=v)
            smem.commit()

    def build(sched):
        return ([Task(name="fill", src_resources=[src], dst_resources=[smem], schedule=sched(src, smem)),
                 consumer_task(smem, out)], {smem: [src], out: [smem]})

    f = expect(rejected(*build(stale)), "value routing", "fill", "smem", line("stale_guard"))
    assert "'flag'" in f.message and "wrote it again" in f.message
    accepted(*build(fresh))


def test_value_from_another_schedule_is_rejected_at_capture():
    src, out = Gmem(name="src"), Gmem(name="out")

    @schedule
    def producer(src):
        with domain_loop(0, K, 1):
            return src.load()

    token = producer(src).steps[0].returns[0]

    @schedule
    def consumer(out):
        with domain_loop(0, K, 1):
            out.store(value=token)  # @foreign_token

    with pytest.raises(ScheduleError) as info:
        consumer(out)
    assert info.value.finding.check == "value routing" and info.value.finding.line == line("foreign_token")




def test_work_on_iterations_whose_guards_skip_the_wait_is_rejected():
    """A consumer that waits on every other iteration (every(2, start=1)) but stores, taking no value, on every
    one: iteration 0 stores before the task ever waited, reading a stage that is not ready. The loop is checked
    as it runs (its unrolled twin was rejected before the loop form was); in phase, it is accepted."""
    gmem_a, smem_a, out = Gmem(name="gmem_a"), Buf(name="smem_a", pipeline_config=_tma_async()), Gmem(name="out")
    graph = {smem_a: [gmem_a], out: [smem_a]}

    @schedule
    def phased_load(gmem_a, smem_a):
        with domain_loop(0, K, 1) as d:
            with d.every(2, start=1):
                coords = gmem_a.compute_coords()
                smem_a.acquire()
                smem_a.tma_load_a(coord_k=coords, coord_m=coords)
                smem_a.commit()

    def drain(store_in_phase):
        @schedule
        def drain_every_other(smem_a, out):
            with domain_loop(0, K, 1) as d:
                with d.every(2, start=1):
                    smem_a.wait()
                if store_in_phase:
                    with d.every(2, start=1):
                        out.store()
                else:
                    out.store()  # @store_every_iteration
                with d.every(2, start=1):
                    smem_a.release()

        return Task(name="drain", src_resources=[smem_a], dst_resources=[out], warp_idx=1, num_warps=1,
                    schedule=drain_every_other(smem_a, out))

    f = rejected([load_task(gmem_a, smem_a, phased_load), drain(False)], graph)
    hit = expect(f, "work bracketing", "drain", "smem_a", line("store_every_iteration"))
    assert "before this task has waited on smem_a" in hit.message
    accepted([load_task(gmem_a, smem_a, phased_load), drain(True)], graph)
