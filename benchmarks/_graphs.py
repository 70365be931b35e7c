"""CUDA-graph timing shared by the GEMM benchmarks: ``reps`` back-to-back launches captured in one
graph, so host launch cost stays out of every side's numbers alike."""
from __future__ import annotations


def reps_for(est_ms):
    """Launches per graph: about a millisecond of work per replay, between 1 and 200."""
    return max(1, min(200, int(round(1.0 / max(est_ms, 1e-4)))))


def capture(torch, launch, reps):
    """A graph of ``reps`` calls of ``launch``, after one warm-up call on a side stream (the capture
    must not see a first call's compile or allocation). ``launch`` must read the current stream
    at every call, or the graph captures nothing."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        launch()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            launch()
    torch.cuda.synchronize()
    return g
