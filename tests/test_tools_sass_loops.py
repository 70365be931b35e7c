"""tools/sass_loops.py's reading of nvdisasm text: loops are backward branches, HGMMA loops only, and the code a
predicated forward branch jumps over inside a loop is counted apart from the straight-line rest."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))

import sass_loops  # noqa: E402

SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_1:
        /*0010*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT ;
        /*0020*/                   ISETP.LT.AND P1, PT, R6, UR8, PT ;
        /*0030*/              @!P1 BRA `(.L_x_2) ;
        /*0040*/                   FSEL R25, R25, -INF , P3 ;
        /*0050*/               @!P3 FSEL R24, R24, -INF , P6 ;
        /*0060*/                   FSEL R26, R26, -INF , P3 ;
.L_x_2:
        /*0070*/                   FMNMX R5, R24, R25, !PT ;
        /*0080*/                   MUFU.EX2 R7, R5 ;
        /*0090*/               @P0 BRA `(.L_x_1) ;
.L_x_3:
        /*00a0*/                   IADD3 R1, R1, 0x1, RZ ;
        /*00b0*/               @P2 BRA `(.L_x_3) ;
        /*00c0*/                   EXIT ;
"""


def test_a_loop_its_skippable_region_and_opcodes():
    instrs, labels = sass_loops.parse(SASS)
    assert len(instrs) == 13 and labels == {".L_x_1": 1, ".L_x_2": 7, ".L_x_3": 10}
    (start, end, skippable, counts), = sass_loops.loops(instrs, labels)  # the IADD3 loop has no HGMMA
    assert (start, end, skippable) == (1, 9, 3)
    assert counts["FSEL"] == 3 and counts["HGMMA"] == 1 and counts["MUFU"] == 1 and counts["BRA"] == 2


def test_nested_forward_branches_skip_an_instruction_once():
    sass = "\n".join([
        ".L_x_1:",
        "        /*0000*/                   HGMMA.64x64x16.F32.BF16 R8, gdesc[UR8], RZ ;",
        "        /*0010*/               @P1 BRA `(.L_x_3) ;",
        "        /*0020*/               @P2 BRA `(.L_x_2) ;",
        "        /*0030*/                   FSEL R1, R1, -INF , P3 ;",
        ".L_x_2:",
        "        /*0040*/                   FSEL R2, R2, -INF , P3 ;",
        ".L_x_3:",
        "        /*0050*/                   FMNMX R5, R1, R2, !PT ;",
        "        /*0060*/               @P0 BRA `(.L_x_1) ;",
    ])
    (start, end, skippable, _), = sass_loops.loops(*sass_loops.parse(sass))
    assert (start, end, skippable) == (0, 6, 3)  # the two FSELs and the inner branch, each once


def test_opcodes_drop_predicates_and_modifiers():
    assert sass_loops.opcode("@!P0 FSEL.FTZ R1, R2, -INF , P3") == "FSEL"
    assert sass_loops.opcode("@UP1 UIADD3 UR4, UR4, 0x1, URZ") == "UIADD3"
    assert sass_loops.opcode("HGMMA.64x64x16.F32.BF16 R88, R120, gdesc[UR8].tnspB, R88") == "HGMMA"


def test_order_shows_runs_commits_waits_and_the_gaps_between():
    """``--order``: HGMMAs up to their commit (``gsb0``) as one run, the wgmma wait with its count, a MUFU run with
    other instructions among it as ``xN/S``, a back-to-back one as ``xN``, and long stretches of the rest as ``+N``."""
    body = ["HGMMA.64x64x16.F32.BF16 R8, gdesc[UR8], RZ, !UPT", "UIADD3 UR8, UR8, 0x2, URZ",
            "HGMMA.64x64x16.F32.BF16 R8, gdesc[UR8], R8, gsb0", "HGMMA.64x64x16.F32.BF16 R40, gdesc[UR12], RZ, !UPT",
            "WARPGROUP.DEPBAR.LE gsb0, 0x1"]
    body += ["FFMA R1, R1, R2, R3"] * 10 + ["MUFU.EX2 R1, R1"] * 3
    body += ["WARPGROUP.DEPBAR.LE gsb0, 0x0", "MUFU.EX2 R4, R4", "FADD R5, R5, R6", "FMUL R5, R5, R4",
             "MUFU.EX2 R7, R7", "F2FP.BF16.F32.PACK_AB R8, R5, R4", "@!P0 BRA `(.L_x_9)",
             "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4+0x10], R3", "BAR.SYNC.DEFER_BLOCKING 0xd, 0x80",
             "SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR4+0x18], RZ", "IADD3 R1, R1, 0x1, RZ"]
    assert sass_loops.order(body) == ("HGMMAx2/3| HGMMA wait<=1 +10 MUFUx3 wait<=0 MUFUx2/4 F2FP BRA try_wait bar "
                                      "arrive +1")


def test_order_ends_a_run_at_a_long_gap():
    body = ["MUFU.EX2 R1, R1"] + ["FFMA R1, R1, R2, R3"] * (sass_loops.GAP + 1) + ["MUFU.EX2 R2, R2"]
    assert sass_loops.order(body) == f"MUFU +{sass_loops.GAP + 1} MUFU"
