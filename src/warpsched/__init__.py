"""warpsched: warp-specialized GPU kernels as explicit, statically checked schedules.

Port a TS kernel by replacing its task-scheduling imports with ``from warpsched import ...``.
"""
from .cooperative import threads, warps
from .errors import Finding, ScheduleError, ValidationError
from .manager import TaskManager, ValidationWarning, VerifyResult
from .model.gmem_flags import CrossCtaProtocol, GmemFlag, GmemWorkspace, GridPoint
from .model.enums import (AsyncLoad, AsyncProducerOp, AsyncThread, PipelineGroupMode, PipelineType,
                          SignalingThreads, WorkAttr)
from .model.ir import ScheduleResult
from .model.memory import (BarrierAllocator, SmemAllocation, SmemAllocator, TmemAllocation,
                           TmemAllocator)
from .model.pipeline_config import PipelineConfig
from .model.pipeline_group import PipelineGroup
from .model.resources import (LAUNCH_COUNTER, MemoryResource, PdlLaunchBarrier, PdlWaitBarrier, StageInfo,
                              TaskLocalVariable, TileSchedulerConfig, WorkQueue, WorkTileInfo,
                              consumer_work, producer_work)
from .model.schedule import domain_loop, schedule, when_false, when_true, work_tile_loop
from .model.task import Task
from .model.tripcount import TripCount, trip_count
from .verify.checker.grid import GridResult, check_grid
from .work import wgmma_wait

__version__ = "0.1.0"

__all__ = [
    "AsyncLoad", "AsyncProducerOp", "AsyncThread", "BarrierAllocator", "CrossCtaProtocol", "Finding",
    "GmemFlag", "GmemWorkspace", "GridPoint", "GridResult", "LAUNCH_COUNTER", "MemoryResource",
    "PdlLaunchBarrier", "PdlWaitBarrier", "PipelineConfig", "PipelineGroup", "PipelineGroupMode",
    "PipelineType", "ScheduleError", "ScheduleResult", "SignalingThreads", "SmemAllocation", "SmemAllocator",
    "StageInfo", "Task", "TaskLocalVariable", "TaskManager", "TileSchedulerConfig", "TmemAllocation",
    "TmemAllocator", "TripCount", "ValidationError", "ValidationWarning", "VerifyResult", "WorkAttr", "WorkQueue",
    "WorkTileInfo", "consumer_work", "domain_loop", "producer_work", "schedule", "when_false", "when_true",
    "check_grid",
    "threads", "trip_count", "warps", "wgmma_wait", "work_tile_loop",
]
