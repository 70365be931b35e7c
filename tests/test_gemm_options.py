"""The GEMM's string options are typed (gemm.config: Schedule, SplitReduce, Raster, EpiSync, AMajor,
BMajor), parsed once where the kernel is configured: a bad value names the field and every allowed
value, and a member stands for its string everywhere a caller's string did (equality, dict keys,
messages, compile keys)."""
from __future__ import annotations

import pytest

from warpsched.kernels.gemm.config import (DEFAULT_TILES, SCHEDULES, AMajor, BMajor, Choice, EpiSync, GemmConfigError,
                                           Raster, Schedule, SplitReduce)


@pytest.mark.parametrize("kind", [Schedule, SplitReduce, Raster, EpiSync, AMajor, BMajor])
def test_a_member_is_its_string(kind):
    for m in kind:
        assert m == m.value and hash(m) == hash(m.value) and f"{m}" == str(m) == m.value and repr(m) == repr(m.value)
        assert {m.value: 1}[m] == 1 and kind.parse(m.value, "x") is m and kind.parse(m, "x") is m
        assert isinstance(m, Choice)


def test_schedules_are_the_enum():
    assert SCHEDULES == ("cooperative", "pingpong", "pingpong_shared") and set(DEFAULT_TILES) == set(SCHEDULES)


@pytest.mark.parametrize("kind, value", [(Schedule, "coop"), (SplitReduce, "tree"), (Raster, "M"),
                                         (EpiSync, None), (AMajor, "n"), (BMajor, ["k"])])
def test_a_bad_value_names_the_field_and_the_choices(kind, value):
    with pytest.raises(GemmConfigError) as e:
        kind.parse(value, "field")
    assert f"field={value!r}: expected one of {[m.value for m in kind]}" in str(e.value)


def test_the_kernel_keeps_the_parsed_options():
    pytest.importorskip("cutlass")
    from warpsched.kernels.gemm.kernel import PersistentGemm

    g = PersistentGemm(schedule="cooperative", split_reduce="serial", split_k=True, raster="n", a_major="m")
    assert (g.schedule, g.split_reduce, g.raster, g.epi_sync, g.a_major, g.b_major) == (
        Schedule.COOPERATIVE, SplitReduce.SERIAL, Raster.N, EpiSync.PAIR, AMajor.M, BMajor.K)
    assert all(type(x) is not str for x in (g.schedule, g.split_reduce, g.raster, g.epi_sync, g.a_major, g.b_major))
    with pytest.raises(GemmConfigError, match=r"raster='x': expected one of \['m', 'n'\]"):
        PersistentGemm(schedule="cooperative", raster="x")


def test_the_kernel_has_a_frozen_typed_record_of_what_it_compiles():
    pytest.importorskip("cutlass")
    import dataclasses

    from warpsched.kernels.gemm.config import GemmConfig
    from warpsched.kernels.gemm.kernel import PersistentGemm

    g = PersistentGemm(schedule="cooperative", tile_mn=(64, 32), k_tiles_min=18, bias="c", activation="silu")
    c = g.config
    assert isinstance(c, GemmConfig) and c.schedule is Schedule.COOPERATIVE and c.tile_mnk == (64, 32, 64)
    assert (c.ab_stages, c.k_tiles_min, c.rings, c.epilogue) == (18, 18, 1, "epi bias c+silu")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.ab_stages = 4
    assert PersistentGemm(schedule="cooperative", tile_mn=(64, 32), k_tiles_min=18, bias="c",
                          activation="silu").config == c  # equal options, equal records
