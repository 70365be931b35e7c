"""Resource state across the lowering's runtime loops, on the GPU: what each loop step reads.

    python3 tools/region_state_gpu.py                                   # H200: launch, compare, PASS / FAIL
    CUTE_DSL_ARCH=sm_90a PYTHONPATH=src .venv/bin/python tools/region_state_gpu.py --cpu   # compiles only

Four TS programs (a 2-stage ring between a producer warp and a consumer warp, ``n`` steps at run
time); the consumer's loop work first stores what it reads, then changes it (``lower/region_state.py``):

- ``declared``: the TS documentation's per-tile state, a field declared ``cutlass.Boolean`` set to a
  Python ``False`` per tile and to ``True`` by each step: out = [0, 1, 1, ...], then 1 after the loop;
- ``dsl``: the same flag held as ``cutlass.Boolean(False)``, as NVIDIA's tutorials write it: the same;
- ``cursor``: a tensor view the step writes ``100 + k`` through and then advances by one element:
  out = [100, 101, ...] (a view not carried would write every step to element 0);
- ``nested``: a count kept in a user's dataclass held by the resource, stored and then incremented by each
  step: out = [0, 1, 2, ...], then n after the loop.

Outputs are poisoned (-1) before each launch, ``n`` is drawn at random per launch (3 launches each).
"""
from __future__ import annotations

import argparse
import os
import random
import sys
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "src"))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
import cutlass.pipeline as pipeline  # noqa: E402

from warpsched import (MemoryResource, PipelineConfig, StageInfo, Task, TaskManager, WorkAttr,  # noqa: E402
                       consumer_work, domain_loop, producer_work, schedule)

SIZE = 64  # elements of the output; n + 1 <= SIZE


def ring_config():
    g = pipeline.CooperativeGroup(pipeline.Agent.Thread, 32)
    return PipelineConfig.create_async_async_pipeline_cfg(num_stages=2, producer_group=g, consumer_group=g)


@dataclass(kw_only=True)
class Ring(MemoryResource):
    @producer_work
    def put(self, stage_info: StageInfo):
        pass

    @consumer_work
    def get(self, stage_info: StageInfo):
        pass


@dataclass(kw_only=True)
class State(MemoryResource):
    """What the programs' state resources share: the output, a per-tile start, and after the loop the value
    ``final()`` gives (if any) stored at ``out[n]``."""

    out: Any = None

    def final(self):
        return None

    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    def start_tile(self, stage_info: StageInfo):
        pass

    @producer_work
    @cute.jit
    def finish(self, stage_info: StageInfo, n: cutlass.Int32):
        if cutlass.const_expr(self.final() is not None):
            if cute.arch.lane_idx() == 0:
                self.out[n] = cutlass.Int32(self.final())


@dataclass(kw_only=True)
class DeclaredFlag(State):
    flag: cutlass.Boolean = field(init=False, default=None)

    def final(self):
        return self.flag

    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    def start_tile(self, stage_info: StageInfo):
        self.flag = False

    @producer_work
    @cute.jit
    def step(self, stage_info: StageInfo):
        if cute.arch.lane_idx() == 0:
            self.out[stage_info.loop_offset] = cutlass.Int32(self.flag)
        self.flag = True


@dataclass(kw_only=True)
class DslFlag(DeclaredFlag):
    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    def start_tile(self, stage_info: StageInfo):
        self.flag = cutlass.Boolean(False)


@dataclass(kw_only=True)
class Cursor(State):
    @producer_work
    @cute.jit
    def step(self, stage_info: StageInfo):
        if cute.arch.lane_idx() == 0:
            self.out[0] = cutlass.Int32(100 + stage_info.loop_offset)
        self.out = cute.domain_offset((1,), self.out)


@dataclass
class Totals:
    count: cutlass.Int32 = 0


@dataclass(kw_only=True)
class NestedCount(State):
    totals: Any = field(default_factory=Totals)

    def final(self):
        return self.totals.count

    @producer_work
    @cute.jit
    def step(self, stage_info: StageInfo):
        if cute.arch.lane_idx() == 0:
            self.out[stage_info.loop_offset] = cutlass.Int32(self.totals.count)
        self.totals.count = self.totals.count + 1


@schedule
def fill(ring, n):
    with domain_loop(0, n, 1):
        ring.acquire()
        ring.put()
        ring.commit()


@schedule
def steps(ring, state, n):
    state.start_tile()
    with domain_loop(0, n, 1):
        ring.wait()
        ring.get()
        ring.release()
        state.step()
    state.finish(n=n)


KINDS = {"declared": DeclaredFlag, "dsl": DslFlag, "cursor": Cursor, "nested": NestedCount}


def expected(kind: str, n: int):
    if kind == "cursor":
        return [100 + k for k in range(n)] + [-1] * (SIZE - n)
    if kind == "nested":
        return list(range(n + 1)) + [-1] * (SIZE - n - 1)
    return [0] + [1] * (n - 1) + [1] + [-1] * (SIZE - n - 1)


def build(kind: str):
    state_type = KINDS[kind]

    @cute.kernel
    def kern(out: cute.Tensor, n: cutlass.Int32):
        ring, state = Ring(name="Ring", pipeline_config=ring_config()), state_type(name="State", out=out)
        tasks = [Task(name="Producer", dst_resources=[ring], warp_idx=0, num_warps=1, schedule=fill(ring, n)),
                 Task(name="Consumer", src_resources=[ring], dst_resources=[state], warp_idx=1, num_warps=1,
                      schedule=steps(ring, state, n))]
        mgr = TaskManager(tasks=tasks, resource_dependency_graph={state: [ring]}, verbose=False)
        mgr.setup_resources_and_tasks()
        mgr.run()

    @cute.jit
    def host(out: cute.Tensor, n: cutlass.Int32):
        kern(out, n).launch(grid=[1, 1, 1], block=[64, 1, 1])

    return host


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", action="store_true", help="compile for sm_90a with fake tensors; launch nothing")
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    failed = 0
    for kind in KINDS:
        host = build(kind)
        if args.cpu:
            from cutlass.cute.runtime import make_fake_tensor
            out = make_fake_tensor(cutlass.Int32, (SIZE,), (1,), assumed_align=4)
            compiled = cute.compile(host, out, cutlass.Int32(4), options="--keep-ptx --gpu-arch sm_90a")
            print(f"{kind:9s} compiled: {compiled.artifacts.PTX.count('mbarrier')} mbarrier lines")
            continue
        import torch
        from cutlass.cute.runtime import from_dlpack

        out = torch.full((SIZE,), -1, dtype=torch.int32, device="cuda")
        compiled = cute.compile(host, from_dlpack(out, assumed_align=4), cutlass.Int32(4))
        for _ in range(3):
            n = rng.randint(2, SIZE - 2)
            out.fill_(-1)
            compiled(from_dlpack(out, assumed_align=4), cutlass.Int32(n))
            torch.cuda.synchronize()
            got, want = out.tolist(), expected(kind, n)
            ok = got == want
            failed += not ok
            print(f"{'PASS' if ok else 'FAIL'} {kind:9s} n={n:2d}: out[:6]={got[:6]} out[n-1:n+2]={got[n - 1:n + 2]}"
                  + ("" if ok else f" expected {want[:6]} ... {want[n - 1:n + 2]}"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
