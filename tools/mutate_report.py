"""The text report of tools/mutate.py: outcome counts, the mutation score, per-operator and
per-file tables, and one listing per outcome class (every survivor with its classification)."""
from __future__ import annotations

from collections import Counter, defaultdict

OUTCOMES = ("killed", "warned", "survived", "timeout", "stillborn", "crash")


def _table(lines, header, rows_by_key, columns):
    lines += [f"| {header} | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for key in sorted(rows_by_key):
        c = rows_by_key[key]
        lines.append(f"| {key} | " + " | ".join(str(c[k]) for k in columns) + " |")


def _listing(lines, title, entries, empty="(none)"):
    lines.append(f"## {title}")
    lines += [f"- {e}" for e in entries] or ([empty] if empty else [])
    lines.append("")


def report(rows, seconds, classify) -> str:
    """``rows``: (Mutant, Outcome) pairs; ``classify(m, o)``: None, or why a survivor is equivalent
    (a reason starting with "GAP" marks a documented gap instead)."""
    kinds = Counter(o.kind for _, o in rows)
    equivalent = [(m, o, classify(m, o)) for m, o in rows if o.kind in ("survived", "warned", "timeout")]
    gaps = [x for x in equivalent if x[2] is not None and x[2].startswith("GAP")]
    eq = [x for x in equivalent if x[2] is not None and not x[2].startswith("GAP")]
    warned = [x for x in equivalent if x[2] is None and x[1].kind == "warned"]
    unclassified = [x for x in equivalent if x[2] is None and x[1].kind != "warned"]
    killed = kinds["killed"]
    non_eq = len(rows) - kinds["stillborn"] - len(eq)
    lines = ["warpsched mutation testing (tools/mutate.py)",
             f"{len(rows)} mutants of {len({m.path for m, _ in rows})} files, {seconds:.0f}s", "",
             "| outcome | mutants |", "|---|---|"]
    lines += [f"| {k} | {kinds[k]} |" for k in OUTCOMES]
    lines += [f"| equivalent (of warned/survived/timeout) | {len(eq)} |",
              f"| non-equivalent, detected by a warning only | {len(warned)} |",
              f"| survivors: documented gaps (not modelled) | {len(gaps)} |",
              f"| unclassified survivors (gaps) | {len(unclassified)} |", ""]
    score = killed / non_eq if non_eq else 1.0
    detected = (killed + len(warned)) / non_eq if non_eq else 1.0
    lines += [f"mutation score killed / non-equivalent = {killed} / {non_eq} = {100 * score:.1f}%",
              f"detected (killed + warned) / non-equivalent = {killed + len(warned)} / {non_eq} = "
              f"{100 * detected:.1f}%"]
    reasons = Counter(why.split(":")[0] if why.startswith(("unreached", "consistent")) else why for _, _, why in eq)
    lines += ["", "| equivalent: reason | mutants |", "|---|---|"]
    lines += [f"| {why[:150]} | {n} |" for why, n in reasons.most_common()]
    lines.append("")
    by_op, by_file = defaultdict(Counter), defaultdict(Counter)
    for m, o in rows:
        by_op[m.op][o.kind] += 1
        by_file[m.path][o.kind] += 1
    _table(lines, "operator", by_op, OUTCOMES)
    lines.append("")
    _table(lines, "file", by_file, ("killed", "warned", "survived", "stillborn"))
    lines.append("")
    _listing(lines, "Non-equivalent mutants detected by a warning only", [f"{m.id}  {o.note}" for m, o, _ in warned])
    _listing(lines, "Survivors that are documented gaps (real bugs the model does not see)",
             [f"{m.id}  {why}" for m, o, why in gaps])
    _listing(lines, "Unclassified survivors (checker gaps)", [f"{m.id}  [{o.kind}] {o.note}" for m, o, _ in unclassified])
    _listing(lines, "Equivalent mutants (why each is still a correct program)",
             [f"{m.id}  [{o.kind}{': ' + o.note if o.note else ''}]: {why}" for m, o, why in eq], empty=None)
    _listing(lines, "Crashes and stillborn mutants",
             [f"{m.id}  [{o.kind}] {o.note}" for m, o in rows if o.kind in ("crash", "stillborn")], empty=None)
    lines.append("## Killed mutants (first error finding)")
    lines += [f"- {m.id}  {o.note}" for m, o in rows if o.kind == "killed"]
    return "\n".join(lines) + "\n"
