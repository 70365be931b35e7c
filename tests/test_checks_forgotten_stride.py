"""A forgotten interleave_stride (issue 27): domain-lane tasks on a dense pipeline are diagnosed at
the config, naming the missing field, the lane tasks and their domain_loop calls, and the tuple to
pass -- not by asking for a larger group, which would make every lane wait on every stage."""
from __future__ import annotations

import re

from test_checks_interleave import NUM_LANES, softmax_program
from test_checks_support import accepted, expect, line, rejected

HERE = "test_checks_interleave.py"


def test_forgotten_consumer_stride_names_the_field_the_task_and_the_lanes():
    f = rejected(*softmax_program(scores_stride=1))
    hit = expect(f, "pipeline thread counts and bytes", "SoftmaxLane0", "scores", line("scores_cfg", _path()))
    loop = line("softmax_loop", _path())
    assert "no interleave_stride on the consumer side" in hit.message
    for lane in (0, 1):  # each lane task and its domain_loop call, file:line (relative to the cwd)
        assert re.search(rf"'SoftmaxLane{lane}' \(domain_loop\({lane}, 8, 2\) at \S*{HERE}:{loop}\)", hit.message)
    assert hit.fix.startswith("pass interleave_stride=(1, 1, 2, 2) to create_umma_async_pipeline_cfg(...)")
    assert "threads(256)" not in hit.fix and "consumer_group stays 128" in hit.expected
    assert len([x for x in f if x.resource == "scores"]) == 1
    # the twin with the stride is accepted (and SAFE)
    m = accepted(*softmax_program(), exhaustive_deadlock_race_check=True)
    assert m.result.checker.verdict == "SAFE"


def test_forgotten_producer_stride():
    f = rejected(*softmax_program(probs_stride=1))
    hit = expect(f, "pipeline thread counts and bytes", "SoftmaxLane0", "probs", None)
    assert hit.line != line("scores_cfg", _path())
    assert "no interleave_stride on the producer side" in hit.message
    assert hit.fix.startswith(f"pass interleave_stride=({NUM_LANES}, {NUM_LANES}, 1, 1) to "
                              "create_async_umma_pipeline_cfg(...)")


def test_tasks_that_are_not_lanes_keep_the_group_size_finding():
    """Both tasks step by 1 (no lanes): a too-small group is what is wrong, as before."""
    f = rejected(*softmax_program(step=1, scores_stride=1, probs_stride=1))
    hit = expect(f, "pipeline thread counts and bytes", "SoftmaxLane0", "scores", line("scores_cfg", _path()))
    assert "threads(256)" in hit.fix and "interleave_stride" not in hit.fix


def _path():
    import os

    return os.path.join(os.path.dirname(os.path.abspath(__file__)), HERE)
