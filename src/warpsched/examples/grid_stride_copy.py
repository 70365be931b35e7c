"""Grid-stride GMEM copy: one task, no pipeline (the TS resources / schedules pages).

  CopyTask (warps 0-3)   InputGmem --get_item() -> item --set_item(data=item)--> OutputGmem

Each thread visits ``start, start + step, ...`` with ``start = bx * threads_per_block + tx``
and ``step = grid_dim_x * threads_per_block``. The value read by the consumer work
``get_item`` (``returns=item``) is routed by the schedule into the producer work ``set_item``.

On the CPU there is no block or thread index: the check takes the view of block 0, thread 0
(``bx = tx = 0``), which has the most iterations. Inside a ``@cute.kernel`` pass
``cute.arch.block_idx()[0]`` / ``cute.arch.thread_idx()[0]`` / ``cute.arch.grid_dim()[0]`` to
``make_copy_schedule`` instead.
"""
from __future__ import annotations

from dataclasses import dataclass

from warpsched import (MemoryResource, StageInfo, Task, TaskLocalVariable, TaskManager, consumer_work,
                       domain_loop, producer_work, schedule)

NUM_ENTRIES = 4096
NUM_WARPS = 4
GRID_DIM_X = 8
UNROLL = 4


@dataclass(kw_only=True)
class InputGmemResource(MemoryResource):
    """The source vector; hands out one element per grid-stride iteration."""

    source_tensor: object = None
    num_entries: int = NUM_ENTRIES
    item: object = TaskLocalVariable.uninitialized()

    def __post_init__(self) -> None:
        self.item = TaskLocalVariable(dtype="Int16", default=0,
                                      docs="Input element loaded for the current grid-stride iteration.")

    @consumer_work(returns=item)
    def get_item(self, stage_info: StageInfo):
        gid = stage_info.loop_offset
        return self.source_tensor[gid] if gid < self.num_entries else 0


@dataclass(kw_only=True)
class OutputGmemResource(MemoryResource):
    """The destination vector."""

    destination_tensor: object = None
    num_entries: int = NUM_ENTRIES

    @producer_work
    def set_item(self, stage_info: StageInfo, data) -> None:
        gid = stage_info.loop_offset
        if gid < self.num_entries:
            self.destination_tensor[gid] = data


def make_copy_schedule(start, step, num_entries=NUM_ENTRIES):
    """The schedule, closed over this thread's grid-stride start and step."""

    @schedule
    def schedule_fn(input_gmem: InputGmemResource, output_gmem: OutputGmemResource) -> None:
        with domain_loop(start, num_entries, step, unroll=UNROLL):
            res = input_gmem.get_item()
            output_gmem.set_item(data=res)

    return schedule_fn


def build(verbose: bool = True, bx: int = 0, tx: int = 0, **manager_options) -> TaskManager:
    input_gmem = InputGmemResource(name="InputGmem")
    output_gmem = OutputGmemResource(name="OutputGmem")
    threads_per_block = NUM_WARPS * 32
    start = bx * threads_per_block + tx
    step = GRID_DIM_X * threads_per_block
    copy_task = Task(name="CopyTask", src_resources=[input_gmem], dst_resources=[output_gmem], warp_idx=0,
                     num_warps=NUM_WARPS, schedule=make_copy_schedule(start, step)(input_gmem, output_gmem))
    return TaskManager(tasks=[copy_task], resource_dependency_graph={output_gmem: [input_gmem]},
                       verbose=verbose, **manager_options)


if __name__ == "__main__":
    build()
