"""What a work body reports while its kernel is traced, held to what the checker assumed of it.

The checker sees a work as its attributes and its resource's declarations; the body itself is opaque. Three
ledgers tie the two together, one task at a time: the TMA bytes a producer bracket's copies deliver against what
its acquire arms (``tx_bytes``), the stage parts a body touches against its task's ``consumer_footprint``
(``footprints``), and the wgmma groups a body commits and waits for against ``WorkAttr.WGMMA`` / ``WGMMA_WAIT``
(``wgmma_watch``)."""
from __future__ import annotations

from . import wgmma_watch
from .footprints import FootprintLedger
from .tx_bytes import TxLedger


class TracedWorkChecks:
    """One task's ledgers: ``mark(context)`` before a work runs, ``worked(...)`` after it returns."""

    def __init__(self, program, task):
        self.task, self.skip = task, program.options.skip_validation
        self.tx = TxLedger(task, self.skip)  # also told of each bracket's acquire / commit (TaskEmitter)
        self.footprints = FootprintLedger(program, task, self.skip)

    @staticmethod
    def mark(context):
        """Where the context's records stand before a work runs."""
        return len(context.tma_copies), len(context.touches), len(context.wgmma_events)

    def worked(self, resource, step, context, mark) -> None:
        """Hold what ``step``'s work recorded since ``mark``."""
        copies, touches, wgmma = mark
        self.tx.worked(resource, step, context.tma_copies[copies:])
        self.footprints.worked(resource, step, context.touches[touches:])
        wgmma_watch.check_work(self.task, resource, step, context.wgmma_events[wgmma:], self.skip)


__all__ = ["TracedWorkChecks"]
