"""PipelineGroup consistency: compatible member configs and the collapsed stage on the group."""
from __future__ import annotations

from warpsched import PipelineConfig, PipelineGroup, PipelineGroupMode, Task, domain_loop, schedule

from test_checks_support import Buf, Gmem, accepted, cg, expect, line, rejected

K = 4


def tma_umma(num_stages=2):
    return PipelineConfig.create_tma_umma_pipeline_cfg(num_stages=num_stages, num_bytes=1024, producer_group=cg(1),
                                                      consumer_group=cg(1), cta_layout_vmnk=(1, 1, 1, 1))


def merge_program(mode=PipelineGroupMode.Merge, b_cfg=None, consumer="group", alloc=None):
    """GEMM mainloop: LoadA and LoadB commit their own members, the MMA releases the group once.
    ``alloc``: register the group with this SmemAllocator."""
    gmem_ab = Gmem(name="gmem_ab")
    smem_a = Buf(name="smem_a", pipeline_config=tma_umma())
    smem_b = Buf(name="smem_b", pipeline_config=b_cfg or tma_umma())
    tmem_c = Buf(name="tmem_c")
    ab_sync = PipelineGroup(name="ab_sync", members=[smem_a, smem_b], mode=mode)  # @group_ctor
    if alloc is not None:
        alloc.add_pipeline_group(ab_sync)

    def loader(res):
        @schedule
        def load(gmem_ab, smem):
            with domain_loop(0, K, 1):
                c = gmem_ab.compute_coords()
                smem.acquire()
                smem.tma_load_a(coord_k=c)
                smem.commit()
        return load(gmem_ab, res)

    @schedule
    def mma_group(tmem_c, group):
        with domain_loop(0, K, 1):
            group.smem_a.try_wait()
            group.smem_a.wait()
            group.smem_b.try_wait()
            group.smem_b.wait()
            da = group.smem_a.build_desc()
            db = group.smem_b.build_desc()
            tmem_c.mma(desc_a=da, desc_b=db)
            group.release()  # one collapsed release for both members

    @schedule
    def mma_member_release(tmem_c, group):
        with domain_loop(0, K, 1):
            group.smem_a.wait()
            group.smem_b.wait()
            da = group.smem_a.build_desc()
            db = group.smem_b.build_desc()
            tmem_c.mma(desc_a=da, desc_b=db)
            group.smem_a.release()  # @member_release
            group.smem_b.release()

    @schedule
    def mma_fused(tmem_c, group):
        with domain_loop(0, K, 1):
            group.try_wait()
            group.wait()
            tmem_c.mma()
            group.release()

    @schedule
    def mma_fused_member_wait(tmem_c, group):
        with domain_loop(0, K, 1):
            group.smem_a.wait()  # @fused_member_wait
            group.smem_b.wait()
            tmem_c.mma()
            group.release()

    @schedule
    def mma_fused_member_release(tmem_c, group):
        with domain_loop(0, K, 1):
            group.wait()
            tmem_c.mma()
            group.smem_a.release()  # @fused_member_release
            group.smem_b.release()

    @schedule
    def mma_bare(tmem_c, a, b, group):
        with domain_loop(0, K, 1):
            a.wait()
            b.wait()
            tmem_c.mma(desc_a=a.build_desc(), desc_b=b.build_desc())
            if group is None:
                a.release()
                b.release()  # @bare_release
            else:
                group.release()

    bare = {"bare_release": None, "bare_group_release": ab_sync}
    if consumer in bare:
        sched = lambda tmem_c, group: mma_bare(tmem_c, smem_a, smem_b, bare[consumer])  # noqa: E731
    else:
        sched = {"group": mma_group, "member_release": mma_member_release, "fused": mma_fused,
                 "fused_member_wait": mma_fused_member_wait, "fused_member_release": mma_fused_member_release}[consumer]
    tasks = [Task(name="LoadA", src_resources=[gmem_ab], dst_resources=[smem_a], warp_idx=0, schedule=loader(smem_a)),
             Task(name="LoadB", src_resources=[gmem_ab], dst_resources=[smem_b], warp_idx=1, schedule=loader(smem_b)),
             Task(name="MMA", src_resources=[smem_a, smem_b], dst_resources=[tmem_c], warp_idx=2,
                  schedule=sched(tmem_c, ab_sync))]
    return tasks, {smem_a: [gmem_ab], smem_b: [gmem_ab], tmem_c: [smem_a, smem_b]}


def test_merge_group_doc_example_accepted():
    accepted(*merge_program())


def test_merge_member_release_is_rejected_hard_rule():
    f = rejected(*merge_program(consumer="member_release"))
    hit = expect(f, "pipeline group consistency", "MMA", "smem_a", line("member_release"))
    assert "ab_sync.release()" in hit.expected


def test_fused_merge_collapses_wait_and_release():
    accepted(*merge_program(mode=PipelineGroupMode.FusedMerge, consumer="fused"))
    f = rejected(*merge_program(mode=PipelineGroupMode.FusedMerge, consumer="fused_member_wait"))
    expect(f, "pipeline group consistency", "MMA", "smem_a", line("fused_member_wait"))


def test_members_need_the_same_num_stages():
    f = rejected(*merge_program(b_cfg=tma_umma(num_stages=3)))
    hit = expect(f, "pipeline group consistency", None, "ab_sync", line("group_ctor"))
    assert "num_stages=3" in hit.message


def test_merge_collapsed_consumer_kind_must_match():
    b_cfg = PipelineConfig.create_tma_async_pipeline_cfg(num_stages=2, num_bytes=1024, producer_group=cg(1),
                                                        consumer_group=cg(1), cta_layout_vmnk=(1, 1, 1, 1))
    f = rejected(*merge_program(b_cfg=b_cfg))
    hit = expect(f, "pipeline group consistency", None, "ab_sync", line("group_ctor"))
    assert "consumer kind" in hit.message


def test_merge_group_op_on_the_wrong_side():
    f = rejected(*merge_program(consumer="fused"))  # group.wait() on a Merge group
    assert any(x.check == "pipeline group consistency" and "not a collapsed op of a Merge group" in x.message
               for x in f)


def tma_async(num_bytes=1024):
    return PipelineConfig.create_tma_async_pipeline_cfg(  # @tma_async_cfg
        num_stages=2, num_bytes=num_bytes, producer_group=cg(1), consumer_group=cg(1), cta_layout_vmnk=(1, 1, 1, 1))


def fork_program(member_commit=False, act_bytes=1024, load_both=False, group_bytes=None):
    """The pipeline-groups page's Fork: two pipeline views of one SMEM A buffer (equal num_bytes),
    one load, one group.commit(); each consumer releases its own member."""
    gmem = Gmem(name="gmem")
    smem_gemm = Buf(name="smem_gemm", pipeline_config=tma_umma())
    smem_act = Buf(name="smem_act", pipeline_config=tma_async(act_bytes))
    out_g, out_a = Gmem(name="out_g"), Gmem(name="out_a")
    explicit = None if group_bytes is None else tma_async(group_bytes)
    fork = PipelineGroup(name="fork", members=[smem_gemm, smem_act], mode=PipelineGroupMode.Fork,  # @fork_ctor
                         pipeline_config=explicit)

    @schedule
    def load_schedule(gmem, group):
        with domain_loop(0, K, 1):
            c = gmem.compute_coords()
            group.smem_gemm.try_acquire()
            group.smem_gemm.acquire()
            group.smem_act.try_acquire()
            group.smem_act.acquire()
            group.smem_gemm.tma_load_a(coord_k=c)
            if load_both:
                group.smem_act.tma_load_a(coord_k=c)  # @fork_second_load
            if member_commit:
                group.smem_gemm.commit()  # @fork_member_commit
                group.smem_act.commit()
            else:
                group.commit()

    def consumer(res, out):
        @schedule
        def drain(res, out):
            with domain_loop(0, K, 1):
                res.wait()
                v = res.read()
                out.store(value=v)
                res.release()
        return drain(res, out)

    tasks = [Task(name="Load", src_resources=[gmem], dst_resources=[smem_gemm, smem_act], warp_idx=0,
                  schedule=load_schedule(gmem, fork)),
             Task(name="Gemm", src_resources=[smem_gemm], dst_resources=[out_g], warp_idx=1,
                  schedule=consumer(smem_gemm, out_g)),
             Task(name="Act", src_resources=[smem_act], dst_resources=[out_a], warp_idx=2,
                  schedule=consumer(smem_act, out_a))]
    return tasks, {smem_gemm: [gmem], smem_act: [gmem], out_g: [smem_gemm], out_a: [smem_act]}


def test_fork_group_doc_example_and_member_commit_rule():
    accepted(*fork_program())
    f = rejected(*fork_program(member_commit=True))
    hit = expect(f, "pipeline group consistency", "Load", "smem_gemm", line("fork_member_commit"))
    assert "fork.commit()" in hit.expected and "Fork group 'fork'" in hit.message


def test_fork_members_must_declare_equal_num_bytes():
    """A member declaring the summed bytes (the old convention) is rejected at the group's line,
    naming both members, their values and where each config was declared."""
    f = rejected(*fork_program(act_bytes=2048))
    hit = expect(f, "pipeline group consistency", None, "fork", line("fork_ctor"))
    assert "smem_gemm num_bytes=1024" in hit.message
    assert "smem_act num_bytes=2048 (config at " in hit.message
    assert f"test_checks_groups.py:{line('tma_async_cfg')})" in hit.message
    assert "once (not the sum)" in hit.message and "1024" in hit.expected
    # an explicit group config with the summed bytes is validated against the members the same way
    f = rejected(*fork_program(group_bytes=2048))
    hit = expect(f, "pipeline group consistency", None, "fork", line("fork_ctor"))
    assert "fork num_bytes=2048" in hit.message
    accepted(*fork_program(group_bytes=1024))


def test_fork_loads_the_shared_data_once():
    """Producer work on both members of a TMA Fork delivers the bytes twice to a barrier that
    expects them once: rejected at the second load; the documented one-load twin is accepted."""
    f = rejected(*fork_program(load_both=True))
    hit = expect(f, "pipeline group consistency", "Load", "smem_act", line("fork_second_load"))
    assert "expects 1024 bytes once per stage" in hit.message and "smem_gemm.tma_load_a()" in hit.expected
    accepted(*fork_program())


def test_fused_merge_member_release_is_rejected_hard_rule():
    f = rejected(*merge_program(mode=PipelineGroupMode.FusedMerge, consumer="fused_member_release"))
    hit = expect(f, "pipeline group consistency", "MMA", "smem_a", line("fused_member_release"))
    assert "ab_sync.release()" in hit.expected and "FusedMerge group 'ab_sync'" in hit.message
    accepted(*merge_program(mode=PipelineGroupMode.FusedMerge, consumer="fused"))


def test_merge_member_release_on_bare_members_is_rejected():
    """The rule holds when the consumer names the bare resources and the group is only registered
    with the allocator (no group.<member> access at all); the group-release twin is accepted."""
    from warpsched import SmemAllocator

    alloc = SmemAllocator()
    f = rejected(*merge_program(consumer="bare_release", alloc=alloc), smem_allocator=alloc)
    hit = expect(f, "pipeline group consistency", "MMA", "smem_b", line("bare_release"))
    assert "ab_sync.release()" in hit.expected
    alloc = SmemAllocator()
    accepted(*merge_program(consumer="bare_group_release", alloc=alloc), smem_allocator=alloc)
