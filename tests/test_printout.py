"""The TaskManager printout: schedule table, phase tags, register summary, verbose=False silence."""
from __future__ import annotations

from dataclasses import dataclass

from warpsched import (MemoryResource, PipelineConfig, Task, TaskLocalVariable, consumer_work, domain_loop,
                       producer_work, schedule, when_true)
from warpsched.examples import gemm
from warpsched.report.printout import cell, register_summary, schedule_table
from warpsched.verify import Program


def build_gemm(verbose, **kw):
    # The checker is not what is under test here.
    return gemm.build(verbose=verbose, exhaustive_deadlock_race_check=False, **kw)


def test_verbose_prints_table_and_register_summary(capsys):
    build_gemm(True)
    out = capsys.readouterr().out
    lines = out.splitlines()
    header = next(ln for ln in lines if "StoreTask[0:4)" in ln)
    # one column per task, in task order, headed name[warp_start:warp_end)
    assert header.index("StoreTask[0:4)") < header.index("LoadTask[4:5)") < header.index("MmaTask[5:6)")
    assert header.startswith("|") and header.count("|") == 4
    assert any("Full (" in ln and ln.strip().startswith("=") for ln in lines)
    assert any("End Full" in ln for ln in lines)
    assert "Phase tags:" in out
    # register budget lines, as the TS printout page shows them
    assert "Task  0 'StoreTask'" in out and "numWarps x (defaultMaxNumRegs - numRegsPerThread) = 4 x (" in out
    assert any(ln.startswith("Num. regs: ") for ln in lines) and any(ln.startswith("Reg budget: ") for ln in lines)


def test_verbose_false_prints_nothing(capsys):
    manager = build_gemm(False)
    assert capsys.readouterr().out == ""
    assert manager.result is not None and manager.result.accepted


def test_rows_walk_head_loop_tail_with_tags(capsys):
    build_gemm(True)
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.startswith("|") and ("Prod" in ln or "Cons" in ln)]
    mma_cells = [r.split("|")[3] for r in rows if r.split("|")[3].strip()]
    # MmaTask: acquire the accumulator in the head, the K loop, commit in the tail
    assert "TmemC" in mma_cells[0] and "ProdTrA" in mma_cells[0] and " H " in mma_cells[0]
    assert any("ProdAcq<-" in c and " H " in c for c in mma_cells)
    assert any("->ConsWai" in c and "SmemAB" in c for c in mma_cells)
    assert "ProdCmt->" in mma_cells[-1] and " T " in mma_cells[-1]
    # the consumer's wait comes after the producer's commit in the walk
    load_commit = next(i for i, r in enumerate(rows) if "ProdCmt->" in r.split("|")[2])
    mma_wait = next(i for i, r in enumerate(rows) if "->ConsWai" in r.split("|")[3])
    assert mma_wait > load_commit


# ------------------------------------------------------------------ guard tags, straight from the IR
@dataclass(kw_only=True)
class Buf(MemoryResource):
    flag: object = TaskLocalVariable.uninitialized()

    @producer_work
    def fill(self, stage_info): ...

    @consumer_work(returns=flag)
    def peek(self, stage_info): ...


@schedule
def tagged(buf):
    buf.try_acquire()
    with domain_loop(0, 4, 1) as d:
        with d.first_iter():
            buf.acquire()
        f = buf.peek()
        with when_true(f):
            buf.fill()
        with d.every(2, start=1):
            buf.fill()
        with d.last_iter():
            buf.commit()
    buf.commit()


def test_cells_carry_phase_and_guard_tags_and_call_index():
    buf = Buf(name="Buf", pipeline_config=PipelineConfig.create_async_async_pipeline_cfg(
        num_stages=2, producer_group=32, consumer_group=32))
    steps = tagged(buf).steps
    cells = [cell(s) for s in steps]
    assert "ProdTrA" in cells[0] and " H " in cells[0]
    assert "ProdAcq<-" in cells[1] and " F " in cells[1]
    assert " ? " in cells[3] and "ProdWrk" in cells[3]
    assert " N " in cells[4] and cells[4].rstrip().endswith("1")  # second fill in the loop: call index 1
    assert "ProdCmt->" in cells[5] and " L " in cells[5]
    assert "ProdCmt->" in cells[6] and " T " in cells[6]
    assert all(len(c) == 30 for c in cells)


def test_table_and_registers_from_a_program():
    buf = Buf(name="Buf")
    t = Task(name="Solo", src_resources=[buf], dst_resources=[buf], warp_idx=2, num_warps=2, num_registers=120,
             schedule=tagged(buf))
    program = Program(tasks=[t], graph={buf: [buf]})
    table = schedule_table(program)
    assert "Solo[2:4)" in table and "End Full" in table
    regs = register_summary(program).splitlines()
    assert regs[0].startswith("Task  0 'Solo'") and regs[0].endswith("= 2 x (248 - 120) = 256")
    # warps 0-1 are idle in Solo's warp group: setmaxnreg is warp-group wide, they move to 120 too
    assert regs[1].startswith("Idle warps [0:2) (group 0)") and regs[1].endswith("= 2 x (248 - 120) = 256")
    assert regs[-2].startswith("Num. regs: 15360 of 31744 (128 threads x 248 at launch")
    assert regs[-1] == "Reg budget: 512"


def test_broadcast_ring_and_lagged_steps_walk_to_the_end():
    """Two consumer tasks waiting on one ring (a broadcast, as attention's K and V) each get the
    stage, and a step under every(1, start=1) is shown but takes no credit in the walked iteration
    0: the FlashAttention program (both at once) used to end its table with a false 'is blocked!'."""
    from warpsched.kernels.attention import forward as att

    table = schedule_table(att.build(verbose=False, exhaustive_deadlock_race_check=False).program)
    assert "is blocked!" not in table
    walked = [ln for ln in table.splitlines() if ln.startswith("|")]
    # each warp group: the loop's lagged V wait (N, shown, no credit) and the tail's, and its K wait
    assert sum(ln.count("SmemV      ->ConsWai") for ln in walked) == 4
    assert sum(ln.count("SmemK      ->ConsWai") for ln in walked) == 2


def test_a_real_shortage_still_stops_the_walk():
    """A consumer task that waits twice on a ring its producer commits once is still shown blocked."""
    buf = Buf(name="Buf", pipeline_config=PipelineConfig.create_async_async_pipeline_cfg(num_stages=2))

    @schedule
    def produce(b):
        with domain_loop(0, 4, 1):
            b.acquire()
            b.fill()
            b.commit()

    @schedule
    def consume(b):
        with domain_loop(0, 4, 1):
            b.wait()
            b.wait()
            b.peek()
            b.release()

    tasks = [Task(name="P", src_resources=[], dst_resources=[buf], warp_idx=0, num_warps=1, schedule=produce(buf)),
             Task(name="C", src_resources=[buf], dst_resources=[], warp_idx=1, num_warps=1, schedule=consume(buf))]
    table = schedule_table(Program(tasks=tasks, graph={buf: [buf]}))
    assert "C: Buf ConsumerWait 1 is blocked!" in table
