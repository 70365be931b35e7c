"""``prepare_backward(..., dq_acc=, dk=, dv=)``: a benchmark's kernel sides reuse one set of output buffers, so two
kernels timed side by side write the same memory (bench/attention_bwd_check.py). A buffer of the wrong shape,
dtype or layout is refused naming what is expected, before anything is compiled or launched."""
from __future__ import annotations

import pytest
import torch

from warpsched.kernels.attention import backward_host as bwd_host
from warpsched.kernels.attention.forward import AttentionConfigError


@pytest.fixture
def cpu_inputs(monkeypatch):
    """q, k, v, out, dout, lse on the CPU, past the device checks (the refusal comes before any launch)."""
    monkeypatch.setattr(bwd_host, "check_args", lambda *a: None)
    monkeypatch.setattr(bwd_host, "_tma_ready", lambda t: t)
    q = torch.zeros(1, 2, 100, 64, dtype=torch.bfloat16)
    return q, q.clone(), q.clone(), q.clone(), q.clone(), torch.zeros(1, 2, 100)


@pytest.mark.parametrize("buf, words", [
    (torch.zeros(1, 2, 100, 64), r"\(1, 2, 128, 64\).*128-row Q block"),  # S_q not rounded up to the Q block
    (torch.zeros(1, 2, 128, 64, dtype=torch.float16), "float32"),
    (torch.zeros(1, 2, 64, 128).transpose(2, 3), "contiguous"),
])
def test_a_reused_dq_accumulator_of_another_shape_is_refused(cpu_inputs, buf, words):
    with pytest.raises(AttentionConfigError, match=words) as err:
        bwd_host.prepare_backward(*cpu_inputs, dq_acc=buf)
    assert "dq_acc=None" in str(err.value)
