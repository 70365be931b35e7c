"""Helper for tests/test_patterns_lowering.py: trace one cluster shape the lowering refuses inside a kernel
for sm_100a and print the LoweringError (a @cute.jit host must live in a file, hence this script)."""
import os, sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "hopper"))
import _common
import cutlass.cute as cute
from warpsched import SignalingThreads as S
from warpsched.examples import split_consumer, leader_routed

WHICH = sys.argv[1]


def builder():
    if WHICH == "split_hopper_v2":  # TmaAsync over a V = 2 group: PipelineTmaAsync is not pair-aware
        return split_consumer.build(verbose=False, kind="hopper", cluster=(2, 1, 1, 1))
    if WHICH == "leader_release_mcast":  # CtaLeader on the release side of a multicast pipeline
        mgr = leader_routed.build(verbose=False, cluster=(1, 2, 1, 1), signaling=S.CtaLeader | S.TaskWarpLeader,
                                  mcast=(True, True))
        (tile,) = [r for r in mgr.resource_dependency_graph if r.name == "tile"]
        object.__setattr__(tile.pipeline_config, "consumer_signaling_threads", S.CtaLeader)
        return mgr
    raise SystemExit(f"unknown variant {WHICH}")


@cute.kernel
def kern():
    mgr = builder()
    mgr.setup_resources_and_tasks()
    mgr.run()


@cute.jit
def host():
    kern().launch(grid=[2, 1, 1], block=[256, 1, 1], cluster=[2, 1, 1])


try:
    cute.compile(host, options=_common.ptx_options("sm_100a"))
    print(WHICH, "compiled")
except Exception as e:
    print(WHICH, type(e).__name__, str(e)[:600])
