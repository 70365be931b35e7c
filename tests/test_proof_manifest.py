"""Proofs shipped with the kernels (warpsched prove, warpsched.verify.manifest): every program the shipped
kernels compile is in the manifest, proven by this checker; a shipped verdict is served without a search;
an entry proven by other checker code is not used."""
from __future__ import annotations

import io
import json

import pytest

from warpsched import prove as prove_mod
from warpsched.verify import manifest as mf
from warpsched.verify.verdicts import VERDICTS


def test_every_shipped_program_is_in_the_manifest():
    missing = prove_mod.missing(prove_mod.shipped_fingerprints())
    assert not missing, (f"{len(missing)} shipped program(s) are not in src/warpsched/proofs/manifest.json for this "
                         f"checker (e.g. {missing[0][1][0]}): run `warpsched prove` and commit the manifest")


def test_a_shipped_verdict_is_served_without_a_search(monkeypatch):
    from warpsched import manager
    from warpsched.kernels.shipped import programs

    monkeypatch.setenv("WARPSCHED_VERDICT_CACHE", "0")  # not from the disk cache
    VERDICTS.clear()

    def no_search(*a, **k):
        raise AssertionError("the exhaustive checker ran")

    monkeypatch.setattr(manager, "run_checker", no_search)
    hits = mf.MANIFEST.hits
    build = programs()["attention backward hd128 full"]
    mgr = build(verbose=False, progress=False, cache_verdict=True)
    assert mgr.result.checker.verdict == "SAFE" and mgr.verdict_cached
    assert mf.MANIFEST.hits == hits + 1


def test_an_entry_proven_by_another_checker_is_not_used(tmp_path):
    path = tmp_path / "manifest.json"
    entry = {"verdict": "SAFE", "states": 3, "seconds": 0.1, "loop_note": "", "text": ""}
    path.write_text(json.dumps({"schema": mf.SCHEMA, "checker": "0" * 64, "entries": {"abc": entry}}))
    assert mf.Manifest(str(path)).lookup("abc") is None
    current = mf.Manifest(str(path))
    current.write({"abc": entry})
    assert current.lookup("abc").verdict == "SAFE" and current.lookup("abd") is None
    path.write_text("{not json")
    assert mf.Manifest(str(path)).lookup("abc") is None  # a corrupt manifest is a miss, never an error


def test_prove_check_names_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(prove_mod, "MANIFEST", mf.Manifest(str(tmp_path / "empty.json")))
    monkeypatch.setattr(prove_mod, "shipped_fingerprints", lambda: {"f" * 64: ["gemm X"], "e" * 64: ["attention Y"]})
    out = io.StringIO()
    assert prove_mod.prove(check_only=True, out=out) == 1
    text = out.getvalue()
    assert "missing: ffffffffffffffff gemm X" in text and "run `warpsched prove`" in text


@pytest.mark.slow
def test_prove_writes_what_it_proved(tmp_path, monkeypatch):
    """One small shipped program proven into an empty manifest, then found by --check."""
    from warpsched.kernels.shipped import programs

    label = "attention backward hd64 full"
    build = programs()[label]
    fp = build(verbose=False, exhaustive_deadlock_race_check=False).fingerprint
    m = mf.Manifest(str(tmp_path / "m.json"))
    monkeypatch.setattr(prove_mod, "MANIFEST", m)
    monkeypatch.setattr(prove_mod, "shipped_fingerprints", lambda: {fp: [label]})
    monkeypatch.setattr("warpsched.kernels.shipped.programs", lambda: {label: build})
    assert prove_mod.prove(out=io.StringIO()) == 0
    assert m.lookup(fp).verdict == "SAFE" and m.data()["entries"][fp]["kernels"] == [label]
    assert prove_mod.prove(check_only=True, out=io.StringIO()) == 0


def test_the_cli_runs_prove_check(capsys):
    """`warpsched prove --check` through the CLI: exit 0 with the manifest as committed, and --help teaches."""
    from warpsched import cli

    assert cli.main(["prove", "--check"]) == 0
    assert "0 to prove" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["prove", "--help"])
    assert "manifest" in capsys.readouterr().out
