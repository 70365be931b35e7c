"""CuTe DSL backend: turns a checked Program into kernel code inside a ``@cute.kernel``.

Entry point: :class:`warpsched.lower.kernel.KernelLowering` (used by
``TaskManager.setup_resources_and_tasks()`` / ``run()``). Importing this package does not
import CuTe DSL; the submodules do.
"""
from __future__ import annotations


class LoweringError(ValueError):
    """A program the checker accepted but this backend cannot (yet) lower faithfully.

    Raised at trace time with the task, resource and schedule call location, never
    silently emitting different barrier traffic than the checker verified.
    """

    def __init__(self, message: str, *, task=None, resource=None, location=None, fix=None):
        parts = [message]
        if task is not None:
            parts.append(f"task: {getattr(task, 'header', task)}")
        if resource is not None:
            parts.append(f"resource: {getattr(resource, 'display_name', resource)}")
        if location is not None:
            parts.append(f"at: {location}")
        if fix:
            parts.append(f"fix: {fix}")
        super().__init__(" | ".join(parts))
        self.task, self.resource, self.location, self.fix = task, resource, location, fix


__all__ = ["LoweringError"]
