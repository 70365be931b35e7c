"""domain_loop's unroll when left out (issue 27): 1 in warpsched code (the TS schedules page), None
(the compiler unrolls, the reference implementation's default) in a module ported with
``port_imports``, so a port keeps the reference's generated code. tools/port_tutorials.py
measures it on CUTLASS's 01_02: 5 TMA / 33 mbarrier lines as ported, as the reference (1 / 9 before)."""
from __future__ import annotations

import types

from warpsched.compat import port_imports

SOURCE = '''
from cutlass.experimental.task_scheduling.schedule_builder import domain_loop, schedule


@schedule
def loop_default(r):
    with domain_loop(0, 8, 1):
        r.work()


@schedule
def loop_pinned(r):
    with domain_loop(0, 8, 1, unroll=1):
        r.work()
'''


def _module(text: str) -> types.ModuleType:
    mod = types.ModuleType("ported_unroll")
    exec(compile(text, "ported_unroll.py", "exec"), mod.__dict__)
    return mod


def _unroll(result):
    return result.domain_loop.unroll


def test_a_ported_module_keeps_the_reference_default():
    mod = _module(port_imports(SOURCE))
    assert mod.__warpsched_port__ is True
    assert _unroll(mod.loop_default(_res())) is None  # the compiler unrolls, as in the reference
    assert _unroll(mod.loop_pinned(_res())) == 1


def test_warpsched_code_defaults_to_no_unrolling():
    text = SOURCE.replace("from cutlass.experimental.task_scheduling.schedule_builder import",
                          "from warpsched import")
    mod = _module(text)
    assert not hasattr(mod, "__warpsched_port__")
    assert _unroll(mod.loop_default(_res())) == 1


def _res():
    from dataclasses import dataclass

    from warpsched import MemoryResource, StageInfo, producer_work

    @dataclass(kw_only=True)
    class Res(MemoryResource):
        @producer_work
        def work(self, stage_info: StageInfo):
            pass

    return Res(name="r")
