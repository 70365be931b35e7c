"""H200: the per-op host-overhead table alone (``bench/_host_ops.py``, which bench/model_block.py also
prints): warpsched's and torch's decode-sized ops, grad mode off and on, host issue / wall µs per call.

    python3 tools/grad_host_ops.py [--calls 300]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))

import torch  # noqa: E402
from _host_ops import host_table  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--calls", type=int, default=300)
a = ap.parse_args()
print(torch.cuda.get_device_name(), torch.__version__, time.strftime("%Y-%m-%d %H:%M"), flush=True)
host_table(a.calls)
