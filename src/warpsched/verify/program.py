"""The program the checks read; it lives with the model (``warpsched.model.program``)."""
from ..model.program import Options, Program, name_of, step_targets

__all__ = ["Options", "Program", "name_of", "step_targets"]
