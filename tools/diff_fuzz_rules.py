"""How tools/diff_fuzz.py classifies a disagreement between warpsched and the reference TS: the
hand-written RULES (each read from samples of its bucket; docs/porting_differences.md), the verdict
classes and buckets, and the loop-form / unrolled-twin comparisons. Outcomes are diff_fuzz.Outcome."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Optional, Tuple

if TYPE_CHECKING:  # diff_fuzz imports this module
    from diff_fuzz import Outcome

# ---------------------------------------------------------------------- hand classification
# Written after reading samples of every bucket (see RESULTS in the module docstring). A rule
# matches (class prefix, warpsched check + message regex, reference check + message regex);
# the first match labels the disagreement. A disagreement no rule matches prints UNCLASSIFIED.
DELIBERATE, REF_GAP, WS_GAP, BUDGET = "deliberate", "reference gap", "warpsched gap", "search budget"
RULES = [  # a program with a malformed declaration first: its other findings follow from it
    ("only warpsched", r"\[task declaration\] warps .* overlap", r"^$", REF_GAP,
     "two tasks on overlapping warp ranges are accepted"),
    ("only warpsched", r"runs before this task has waited on \w+, which \w+ depends on, and takes no value", r"^$",
     REF_GAP, "work that takes no value on an iteration whose every() guard skips the task's wait (phases out of "
     "step): it reads its upstream before any stage is ready; the reference reads the loop body as written (it "
     "rejects the unrolled twin)"),
    ("only warpsched", r"num_warps=0 is not a positive int", r"^$", REF_GAP,
     "a task of zero warps: warpsched refuses it at its declaration, the reference accepts it"),
    ("only reference", None, r"TaskWarpLeader is only supported for TMA", DELIBERATE,
     "TaskWarpLeader on a non-TMA producer: warpsched lowers it (bar.sync over the task's warps, then the "
     "leader warp arrives) and counts that warp; the reference allows it on TMA producers only"),
    ("only reference", None, r"ProducerCommit from \w+ not consumed", WS_GAP,
     "a commit no consumer waits for before the kernel ends (producer runs more iterations than a "
     "consumer): the checker's balance check (verify/checker/balance.py) rejects it, so a hit here is a "
     "regression of that check"),
    ("only reference", None, r"Loop guards can only be used with ScheduleStageType.Loop", DELIBERATE,
     "when_true in the head / tail (outside domain_loop): warpsched lowers it as a runtime if and checks "
     "both branches; the reference's legacy schedule lists allow guards on loop entries only"),
    ("only reference", None, r"TmaUmma\): consumer_group.size=\d+ but TCGen05Mma", DELIBERATE,
     "two MMA tasks release one TmaUmma stage: warpsched counts one tcgen05.commit arrival per releasing "
     "task; the reference wants 1 whatever the number of tasks (the stage would free after the first MMA)"),
    ("only warpsched", r"producer_group is size \d+, but task .* \((\d+) warp\(s\)\) makes \1 producer arrival\(s\) "
     r"per stage on a UmmaAsync pipeline", r"^$", DELIBERATE,
     "a UmmaAsync producer task of several warps: each warp's elected thread issues a tcgen05.commit (CUTLASS "
     "elects per warp) and warpsched counts each; the generator and the reference assume one commit per task"),
    ("only reference", None, r"UmmaAsync\): producer_group.size=\d+ but TCGen05Mma", DELIBERATE,
     "the UmmaAsync producer task of several warps, seen from the reference's side: warpsched accepts a "
     "producer_group of the task's warp count (one tcgen05.commit per warp); the reference wants 1"),
    ("only warpsched", r"consumer_group is size \d+, but tasks? .* on a TmaUmma pipeline", r"^$", DELIBERATE,
     "the same TmaUmma arrival count, seen from the other side (two MMA tasks, consumer_group size 1)"),
    ("only reference", None, r"cannot be nested", DELIBERATE,
     "nested guards (first_iter in first_iter, when_true in first_iter): warpsched lowers and checks "
     "nested ifs; the reference forbids nesting"),
    ("only reference", None, r"condition token is stale", WS_GAP,
     "a when_true on a token whose slot was written again: fixed (value routing checks guards too), so a hit "
     "here is a regression"),
    ("only warpsched", r"try_(acquire|wait)\(\) on \w+ (is not followed by its blocking|runs where)", r"^$",
     DELIBERATE, "stricter: a try_* probe's next call on its resource must be its blocking call, under the same "
     "guards (else the probe answers for another stage, or is dropped at a guard's end); the reference accepts it"),
    ("only warpsched", r"num_bytes=0 on a Tma", r"^$", REF_GAP,
     "a TMA full barrier armed with 0 bytes completes on the arrival alone, before any byte lands"),
    ("only warpsched", r"num_bytes=-\d+ is invalid", r"^$", REF_GAP, "negative num_bytes accepted"),
    ("only warpsched", r"deadlock(.|\n)*transaction byte\(s\) outstanding", r"^$", REF_GAP,
     "an acquire whose TMA load is missing on some iteration arms num_bytes that never land: a hang; the "
     "reference's search does not model transaction bytes"),
    ("only warpsched", r"deadlock.*ProducerAcquire on \w+\.empty.*of \d+ arrival", r"^$", REF_GAP,
     "a broadcast consumer skips its release on some path: the empty barrier never gets every consumer's "
     "arrivals; the reference's search lets one consumer's release free the stage"),
    ("only warpsched", r"deadlock.*ConsumerWait", r"^$", REF_GAP,
     "a consumer's flag differs from the producer's on some iteration (a decide under first_iter, a "
     "one-sided guard): the reference gives each when_true key one value for the whole run"),
    ("only reference", None, r"ProducerAcquire from \w+ not matched by ConsumerRelease", WS_GAP,
     "a waited stage never released before the kernel ends: the producer_tail the lowering emits then waits "
     "forever; the checker's balance check rejects it, so a hit here is a regression of that check"),
    ("only warpsched", r"(acquire|wait)\(\) while the stage (acquired|waited) at .* is not (committed|released)",
     r"^$", REF_GAP, "an acquire (wait) before the previous stage's commit (release): the late commit / release "
     "lands on another stage; the reference only balances the counts"),
    ("only warpsched", r"release\(\) without a preceding wait\(\)", r"^$", REF_GAP,
     "an extra release: an over-arrival on the next stage's empty barrier frees a stage still being read"),
    ("only warpsched", r"(producer|consumer) work \S+ runs outside an? ", r"^$", REF_GAP,
     "work outside its acquire/commit (wait/release) bracket in the head / tail: not flagged by the reference "
     "there (a race on a thread-arrival pipeline; harmless on TMA, whose commit is a no-op)"),
    ("only warpsched", r"race: .* \(between its acquire and commit\)", r"^$", DELIBERATE,
     "conservative: TS's pipeline window (a producer holds the stage from acquire to commit); here the "
     "commit moved past another acquire. On TMA the commit is a no-op, so the hardware would not race"),
    ("only warpsched", r"\[dma ordering\] \S+\(\) \(\w+ producer\) reads \w+ outside its wait\(\)/release\(\) window",
     r"^$", REF_GAP, "a hardware producer's load (TMA / UMMA) on iterations where the task holds no stage of its "
     "upstream (every() guards out of phase, a wait deleted): it reads a stage already handed back or not yet "
     "waited; the reference's DMA-edge rule reads the order of the loop body, not the guards' iterations (it "
     "rejects the unrolled twin of the handed-back case)"),
    ("only warpsched", r"unconsumed commit: ", r"^$", REF_GAP,
     "a committed stage that a consumer never waits for on some path (its when_true only it has): a dropped "
     "tile, and the producer's end-of-kernel drain waits for it forever"),
    ("only warpsched", r"\.wait\(\) is never released \(and no other task releases", r"^$", REF_GAP,
     "the release sits under a when_true only this task has: on the false path the waited stage is never "
     "handed back"),
    ("only reference", None, r"missing ProducerCommit after ProducerWork group", DELIBERATE,
     "the acquire with no commit sits under an every() guard that never fires at the compiled trip count (dead "
     "code): warpsched checks the trip count the kernel is compiled with, the reference the code as written"),
    ("timeout", None, None, BUDGET,
     "per-iteration runtime flags multiply the states past max_states (warpsched explores every flag "
     "value on every iteration; the reference one value per key per run)"),
]


def form_key(o: "Outcome") -> Tuple[str, Tuple[str, ...], bool]:
    """What a loop's form may not change: the verdict, the static checks that reject, and whether the
    exhaustive checker rejects. (Which problem kinds the checker reports beyond the first depends on
    the order it meets them in: it searches only a little further once the program is UNSAFE.)"""
    return (o.kind, tuple(c for c in o.checks if not c.startswith("checker:")),
            any(c.startswith("checker:") for c in o.checks))


def twin_conflict(loop: "Outcome", twin: Optional["Outcome"]) -> bool:
    """The exhaustive checker's verdict changes when the loops are written out. (A static check
    reads a loop body as written, for every trip count, so a structural rejection of the loop
    form that the straight-line twin avoids, e.g. a first_iter guard when K = 1, is no conflict.)"""
    if twin is None or twin.kind == loop.kind or {loop.kind, twin.kind} != {"accept", "reject"}:
        return False
    rejecting = loop if loop.kind == "reject" else twin
    return any(c.startswith("checker:") for c in rejecting.checks)


def hand_label(cls: str, ws: "Outcome", ref: "Outcome", ws_twin: Optional["Outcome"] = None) -> Tuple[str, str]:
    if twin_conflict(ws, ws_twin):
        return ("WARPSCHED BUG", f"its verdict on the loop ({ws.kind}) and on the unrolled twin ({ws_twin.kind}) "
                "differ: one of them is wrong for this exact trip count")
    for prefix, ws_re, ref_re, label, why in RULES:
        if not cls.startswith(prefix):
            continue
        ws_text = ws.message if ws.kind == "reject" else ""
        ref_text = ref.message if ref.kind == "reject" else ""
        if ws_re is not None and not re.search(ws_re, ws_text):
            continue
        if ref_re is not None and not re.search(ref_re, ref_text):
            continue
        return label, why
    return "UNCLASSIFIED", "read it"


def verdict_class(ws: "Outcome", ref: "Outcome") -> str:
    if "crash" in (ws.kind, ref.kind):
        return "crash (" + ", ".join(n for n, o in (("warpsched", ws), ("reference", ref)) if o.kind == "crash") + ")"
    if "timeout" in (ws.kind, ref.kind) or "incomplete" in (ws.kind, ref.kind):
        return "timeout / incomplete"
    if ws.kind == ref.kind:
        return f"both {ws.kind}"
    return "only warpsched rejects" if ws.kind == "reject" else "only reference rejects"


def bucket(ws: "Outcome", ref: "Outcome") -> str:
    """Which checks rejected on each side (the finding's check family / the reference's check function)."""
    return f"ws[{', '.join(ws.checks) or ws.kind}] vs ref[{', '.join(ref.checks) or ref.kind}]"


def sub_bucket(ws: "Outcome", ref: "Outcome") -> str:
    return ws.sig if ws.kind == "reject" else ref.sig
