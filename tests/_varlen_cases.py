"""Ragged batches shared by the packed-attention tests (tests/test_attention_varlen*.py): sequence lengths with
empty and one-token sequences, S_q != S_k, and a few random ones."""
from __future__ import annotations

import itertools
import random


def _offsets(lengths):
    return [0] + list(itertools.accumulate(lengths))


_RANDOM = [[random.Random(s).randrange(0, 700) for _ in range(6)] for s in range(3)]
LENGTHS = [([5, 0, 1, 300, 129], [5, 7, 0, 300, 1000]), ([1], [1]), ([0, 0, 64], [3, 0, 64])] + [
    (lengths, lengths) for lengths in _RANDOM]
