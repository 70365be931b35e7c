"""The hand classification of tools/mutate.py's survivors: mutant key -> why it is equivalent.

A key names the file, the innermost function, the operator and its detail (no line number, so the
table survives edits elsewhere in the file). Every reason says why the mutant is still a correct
program (or, for the functional ones, why its change is outside the synchronization properties the
checker proves)."""
from __future__ import annotations

from typing import Dict

from mutate_targets import BUNDLED, HOPPER, PATTERNS

R_VALUE = ("the moved call uses only a value already read into registers (a token a read returned inside the "
           "bracket), not the stage: the release may come before or after it")
R_BATCHED_PROBE = ("a try_ probe moved past an adjacent call on another resource: its next call on its own resource is "
                   "still its blocking verb, and only that verb moves the phase it probed, so its answer cannot go stale "
                   "(batched probes, accepted since the checker reads a probe per resource)")
R_INDEP_WAITS = "two waits on different pipelines: the work after them runs only once both completed, in either order"
R_INDEP_RELEASES = ("two releases of different pipelines with no access between them: both stages are handed back "
                    "after the last read either way")
R_COORDS = "the coordinates come from the loop offset, not from the stage: computing them after the acquire changes nothing"
R_ACQ_EARLY = ("the output stage is reserved (acquire) one call earlier, before the input is read: no access leaves its "
               "bracket, and the acquire waits only on the output pipeline's own consumer")
R_COMMIT_RELEASE = "adjacent signals (commit, release) on different pipelines after all the work: their order is immaterial"
R_PROXY_ACQ = "the proxy stage is reserved before the second wait; the proxy's commit (the signal) still follows both waits"
R_EMPTY_LOOP = "the domain loop has an empty body (it only places the queue epilogue in the tail): its bounds change nothing"
R_FUNCTIONAL = ("the guard decides which value is written to global memory (the kernel's output), not when a barrier, "
                "stage or shared byte is touched: outside the synchronization properties the checker proves")
R_FUNCTIONAL_MMA = ("the zero-initialising MMA runs on other iterations (wrong sums, the kernel's output); every wgmma "
                    "group is still retired by the same wait_group before its stage is released (the checker proves the "
                    "mutant SAFE)")
R_DESC_AFTER_WAIT = "the descriptor of smem_a is still built after smem_a's wait; the wait on smem_b only moves later"
R_STAGE_AFTER_WAIT = "the stage index of smem_a is read after smem_a's wait, and the store still follows both waits"
R_GROUP_ACQ = "two acquires of the Fork's members and their loads: each load still follows its own member's acquire"
R_SPLIT_RELEASE = ("the tile is handed back right after partials.wait(): the wait task committed that partial after it "
                   "finished reading the tile, so the read is already ordered; the drain reads partials, not tiles")
R_DRAIN_LAST = ("the release after the loop hands back the last stage once every load was issued: no later load reuses it, "
                "so its order against the drain of the TMA stores is immaterial in this program")
R_SHALLOW = ("one stage fewer than the allocation holds: every stage index stays inside the layout and each stage still "
             "holds a whole tile; a shallower ring is a correct pipeline (an AsyncAsync ring: no transaction bytes to compare)")
R_RELU_WARPS = ("ProducerTask commits with TaskWarpLeader: one warp arrives 32 times and waits on the same empty barrier "
                "with one warp or two; with one warp lanes 32..63 of a row are not written (output), nothing else moves")
R_CLUSTER_LEADER = ("on the (1, 2, 1, 1) cluster every CTA leads its own CTA group (V = 1), so CtaLeader and All release "
                    "from the same CTAs, and TaskWarpLeader on the 1-warp compute task is All")

R_SAME_COUNT = ("the trip count is unchanged (the end is a multiple of the step, or range(start + 1, end, step) still "
                "has as many values): only the rows each iteration addresses move (the kernel's output)")
R_ONE_TILE = ("one tile per kernel: the accumulator stage is written once, so nothing can overwrite it after the "
              "release and the drain reads the same values (the upstream-read rule does not flag work after the "
              "task's wait, which a register epilogue cannot be told from)")
R_LAST_RETIRE = ("the last release after the loop hands back the last stage once every load was issued: no later TMA "
                 "load reuses it, so the final wgmma wait may come after it in this program")
R_LEADER_RELEASE = ("the groups are derived from the tasks: with TaskWarpLeader the MMA task's leader warp releases for "
                    "its 8 warps after the task-wide named barrier, and the derived consumer count follows")
R_STORE_TWICE = ("both StoreTask warps wait, issue the TMA store of the same tile (the same bytes twice) and release "
                 "after their own bulk-store wait; the derived consumer count follows the two warps")


def _ids(reason, *ids):
    return {i: reason for i in ids}


B, H, P = BUNDLED, HOPPER, PATTERNS
CLASSIFIED: Dict[str, str] = {
    **_ids(R_SAME_COUNT, f"{B}/tma_copy.py::load_schedule:loop-start:+1", f"{B}/tma_copy.py::load_schedule:loop-step:+1",
           f"{B}/tma_copy.py::store_schedule:loop-start:+1", f"{B}/tma_copy.py::store_schedule:loop-step:+1",
           f"{B}/interleaved.py::wait_only:loop-step:+1", f"{P}/interleaved.py::pr_produce:loop-start:+1",
           f"{P}/interleaved.py::pr_release:loop-start:+1"),
    **_ids(R_ONE_TILE, f"{B}/split_consumer.py::store_schedule:swap-up:release<->gmem_d.store"),
    f"{H}/relu_pipeline.py::consumer_schedule:guard-drop:when_false": R_FUNCTIONAL,
    f"{H}/wgmma_gemm.py::mma_schedule:swap-up:release<->smem_ab.retire": R_LAST_RETIRE,
    f"{H}/wgmma_gemm.py::build:signal:consumer_signaling_threads=TaskWarpLeader(added)": R_LEADER_RELEASE,
    f"{H}/tma_copy.py::build:warps+1#1": R_STORE_TWICE,
    **_ids(R_VALUE, f"{B}/tma_copy.py::store_schedule:swap-down:release<->output_gmem.store", f"{B}/gemm.py::store_schedule:swap-up:release<->gmem_d.store",
           f"{B}/gemm_persistent.py::store_schedule:swap-up:release<->gmem_d.store", f"{H}/interleaved_copy.py::consume:swap-down:release<->out.store",
           f"{H}/relu_pipeline.py::consumer_schedule:swap-up:release<->pos = buf.is_positive", f"{H}/wgmma_gemm.py::mma_schedule:swap-down:release<->gmem_c.store",
           f"{P}/leader_routed.py::consume:swap-up:release<->out.store_plus_one", f"{P}/interleaved.py::wl_consume:swap-up:release<->out.store"),
    **_ids(R_BATCHED_PROBE, f"{B}/tma_copy.py::load_schedule:swap-up:try_acquire<->gmem_idx = input_gmem.compute_coords",
           f"{B}/gemm.py::load_schedule:swap-up:try_acquire<->coords = gmem_ab.compute_coords",
           f"{B}/gemm_persistent.py::load_schedule:swap-up:try_acquire<->coords = gmem_ab.compute_coords",
           f"{B}/gemm_persistent.py::mma_schedule:swap-up:try_acquire<->tmem_c.init_work_tile_state",
           f"{B}/gemm_persistent.py::mma_schedule:swap-down:commit<->wq.try_wait",
           f"{B}/gemm_persistent.py::store_schedule:swap-down:release<->wq.try_wait",
           f"{H}/relu_pipeline.py::producer_schedule:swap-up:try_acquire<->v = src.load"),
    **_ids(R_EMPTY_LOOP, f"{B}/gemm_persistent.py::store_schedule:loop-start:+1", f"{B}/gemm_persistent.py::store_schedule:loop-end:+1",
           f"{B}/gemm_persistent.py::store_schedule:loop-step:+1"),
    **_ids(R_COORDS, f"{B}/split_consumer.py::load_schedule:swap-up:acquire<->coords = gmem.compute_coords",
           f"{P}/split_consumer.py::load_schedule:swap-up:acquire<->coords = gmem.compute_coords",
           f"{H}/tma_copy.py::load_schedule:swap-up:acquire<->coords = gmem_x.tile_coords", f"{H}/wgmma_gemm.py::load_schedule:swap-up:acquire<->k = gmem_ab.k_coord"),
    **_ids(R_INDEP_WAITS, f"{B}/split_consumer.py::sync_schedule:swap-down:wait<->smem_b.wait", f"{B}/split_consumer.py::unsplit_schedule:swap-down:wait<->smem_b.wait",
           f"{P}/split_consumer.py::sync_schedule:swap-down:wait<->smem_b.wait", f"{H}/group_add.py::add_merge:swap-down:wait<->grp.smem_b.wait"),
    **_ids(R_PROXY_ACQ, f"{B}/split_consumer.py::sync_schedule:swap-down:wait<->proxy.acquire", f"{P}/split_consumer.py::sync_schedule:swap-down:wait<->proxy.acquire"),
    **_ids(R_INDEP_RELEASES, f"{B}/split_consumer.py::mma_schedule:swap-down:release<->smem_b.release",
           f"{B}/split_consumer.py::compute_schedule:swap-down:release<->smem_b.release", f"{B}/split_consumer.py::unsplit_schedule:swap-down:release<->smem_b.release",
           f"{P}/split_consumer.py::compute_schedule:swap-down:release<->smem_b.release", f"{B}/interleaved.py::release_only:swap-down:release<->partials.release",
           f"{P}/interleaved.py::pr_release:swap-down:release<->partials.release"),
    **_ids(R_DESC_AFTER_WAIT, f"{B}/split_consumer.py::unsplit_schedule:swap-down:wait<->desc_a = smem_a.build_desc"),
    **_ids(R_ACQ_EARLY, f"{B}/interleaved.py::wait_only:swap-up:acquire<->tiles.read", f"{B}/interleaved.py::softmax_lane:swap-up:acquire<->scores.compute_softmax",
           f"{P}/interleaved.py::pr_wait:swap-up:acquire<->v = rows.read", f"{P}/interleaved.py::softmax_lane:swap-up:acquire<->p = scores.compute_softmax"),
    **_ids(R_COMMIT_RELEASE, f"{B}/interleaved.py::softmax_lane:swap-down:commit<->scores.release", f"{P}/interleaved.py::softmax_lane:swap-down:commit<->scores.release"),
    **_ids(R_SPLIT_RELEASE, f"{B}/interleaved.py::release_only:swap-up:release<->partials.drain", f"{P}/interleaved.py::pr_release:swap-up:release<->partials.drain"),
    **_ids(R_STAGE_AFTER_WAIT, f"{H}/group_add.py::add_merge:swap-down:wait<->stage = grp.smem_a.stage"),
    **_ids(R_GROUP_ACQ, f"{H}/group_add.py::load_fork:swap-down:acquire<->grp.smem_b.acquire", f"{H}/group_add.py::load_fork:swap-down:acquire<->grp.smem_a.load"),
    **_ids(R_FUNCTIONAL, f"{H}/relu_pipeline.py::consumer_schedule:guard-drop:when_true", f"{H}/relu_pipeline.py::consumer_schedule:guard-flip:when_true->when_false",
           f"{H}/relu_pipeline.py::consumer_schedule:guard-flip:when_false->when_true", f"{H}/relu_pipeline.py::consumer_schedule:guard-drop:every",
           f"{H}/relu_pipeline.py::consumer_schedule:guard-flip:every-period+1", f"{H}/relu_pipeline.py::consumer_schedule:guard-flip:every-start+1",
           f"{H}/relu_pipeline.py::consumer_schedule:guard-drop:last_iter", f"{H}/relu_pipeline.py::consumer_schedule:guard-flip:last_iter->first_iter"),
    **_ids(R_FUNCTIONAL_MMA, f"{H}/wgmma_gemm.py::mma_schedule:guard-drop:first_iter", f"{H}/wgmma_gemm.py::mma_schedule:guard-flip:first_iter->last_iter"),
    # group_add / tma_copy stages-1 (TMA rings) are rejected on purpose: num_bytes must fill one stage of the
    # allocations (allocations of num_stages x num_bytes), unless the config declares partial_stage=True
    **_ids(R_SHALLOW, f"{H}/relu_pipeline.py::build:stages-1"),
    **_ids(R_RELU_WARPS, f"{H}/relu_pipeline.py::build:warps-1"),
    **_ids(R_DRAIN_LAST, f"{H}/tma_copy.py::store_schedule_lag1:swap-up:release<->gmem_y.drain"),
    **_ids(R_CLUSTER_LEADER, f"{P}/split_consumer.py::tile_cfg:signal:consumer_signaling_threads=TaskWarpLeader"),
}
