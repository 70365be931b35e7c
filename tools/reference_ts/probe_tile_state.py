"""Reference TS on the CPU: per-tile state kept in a resource field across a ``domain_loop`` (FACTS.md).

    .venv/bin/python tools/reference_ts/probe_tile_state.py python   # the TS docs' form: ``self.flag = False``
    .venv/bin/python tools/reference_ts/probe_tile_state.py dsl      # ``self.flag = cutlass.Boolean(False)``

Each loop step stores the flag it reads; the printout lists the kernel's global stores.
"""
import os, sys
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
from dataclasses import dataclass, field
from typing import Any
import cutlass, cutlass.cute as cute, cutlass.pipeline as pipeline
from cutlass.cute.runtime import make_fake_tensor
from cutlass.experimental.task_scheduling import schedule, domain_loop, producer_work, consumer_work, WorkAttr
from cutlass.experimental.task_scheduling.resources import MemoryResource, PipelineConfig, StageInfo
from cutlass.experimental.task_scheduling.task import Task
from cutlass.experimental.task_scheduling.task_manager import TaskManager
MODE = sys.argv[1]  # python | dsl
SEEN = []
def _cfg():
    g = pipeline.CooperativeGroup(pipeline.Agent.Thread, 32)
    return PipelineConfig.create_async_async_pipeline_cfg(num_stages=2, producer_group=g, consumer_group=g, cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)))
@dataclass(kw_only=True)
class Ring(MemoryResource):
    @producer_work
    def put(self, stage_info: StageInfo):
        pass
    @consumer_work
    def get(self, stage_info: StageInfo):
        pass
@dataclass(kw_only=True)
class Acc(MemoryResource):
    out: Any = None
    flag: cutlass.Boolean = field(init=False, default=None)
    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    @cute.jit
    def start_tile(self, stage_info: StageInfo):
        if cutlass.const_expr(MODE == "python"):
            self.flag = False
        else:
            self.flag = cutlass.Boolean(False)
    @producer_work
    @cute.jit
    def step(self, stage_info: StageInfo):
        SEEN.append(("step", type(self.flag).__name__, repr(self.flag)))
        self.out[stage_info.loop_offset] = cutlass.Int32(self.flag)
        self.flag = True
    @producer_work
    @cute.jit
    def finish(self, stage_info: StageInfo):
        SEEN.append(("after", type(self.flag).__name__, repr(self.flag)))
        self.out[15] = cutlass.Int32(self.flag)
def make_producer(n):
  @schedule
  def producer(ring):
      with domain_loop(0, n, 1):
          ring.acquire(); ring.put(); ring.commit()
  return producer
def make_consumer(n):
  @schedule
  def consumer(ring, acc):
      acc.start_tile()
      with domain_loop(0, n, 1):
          ring.wait(); ring.get(); ring.release()
          acc.step()
      acc.finish()
  return consumer
@cute.kernel
def kern(out: cute.Tensor, n: cutlass.Int32):
    ring, acc = Ring(name="Ring", pipeline_config=_cfg()), Acc(name="Acc", out=out)
    tasks = [Task(name="P", src_resources=[], dst_resources=[ring], warp_idx=0, num_warps=1, schedule=make_producer(n)(ring)),
             Task(name="C", src_resources=[ring], dst_resources=[acc], warp_idx=1, num_warps=1, schedule=make_consumer(n)(ring, acc))]
    mgr = TaskManager(tasks=tasks, resource_dependency_graph={acc: [ring]}, verbose=False)
    mgr.setup_resources_and_tasks()
    mgr.run()
@cute.jit
def host(out: cute.Tensor, n: cutlass.Int32):
    kern(out, n).launch(grid=[1, 1, 1], block=[64, 1, 1])
out = make_fake_tensor(cutlass.Int32, (16,), (1,), assumed_align=16)
c = cute.compile(host, out, cutlass.Int32(4), options="--keep-ptx")
print(SEEN)
ptx = c.__ptx__ if hasattr(c, "__ptx__") else c.artifacts.PTX
import re
print("st.global lines:", [l.strip() for l in ptx.splitlines() if "st.global" in l])
