"""What a transition raises: a property violation, or a run past the loop model's bound."""
from __future__ import annotations


class Violation(Exception):
    def __init__(self, kind: str, text: str, exec_index: int, step=None, region=None, barrier=None):
        super().__init__(text)
        self.kind, self.text, self.exec_index, self.step = kind, text, exec_index, step
        self.region, self.barrier = region, barrier


class Unbounded(Exception):
    pass
