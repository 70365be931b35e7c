"""`warpsched` invoked with random command lines over broken user files (empty, syntax error, raising, returning
the wrong thing, exiting, recursing, Ctrl-C) and bad options: no invocation may end in a Python traceback through
warpsched's own code (a user mistake gets a message; the user's own frames may show).

    .venv/bin/python tools/cli_fuzz.py [--seed 1] [--n 60]

Prints each offending command line with its output and the count; exits 1 when there is one.
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--n", type=int, default=60)
args = ap.parse_args()
random.seed(args.seed)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.chdir(ROOT)
tmp = tempfile.mkdtemp()
files = {
 "empty.py": "",
 "syntax.py": "def build(:\n",
 "raises.py": "def build():\n    raise RuntimeError('user bug')\n",
 "none.py": "def build():\n    return None\n",
 "int.py": "def build():\n    return 3\n",
 "import_err.py": "import not_a_module_xyz\n",
 "args.py": "def build(x):\n    return x\n",
 "notpy.txt": "hello",
 "gen.py": "def build():\n    yield 1\n",
 "exit.py": "import sys\nsys.exit(3)\n",
 "recursion.py": "def build():\n    return build()\n",
 "kb.py": "def build():\n    raise KeyboardInterrupt\n",
}
for n, t in files.items():
    open(os.path.join(tmp, n), "w").write(t)
targets = [os.path.join(tmp, n) for n in files] + [os.path.join(tmp, n) + ":nope" for n in files] + [
    "src/warpsched/examples/gemm.py", "src/warpsched/examples/gemm.py:missing", "warpsched.examples.gemm",
    "no/such/file.py", "", ":", "::", "warpsched.examples.gemm:build:extra", "/dev/null", tmp]
opts = ["--example", "gemm", "nosuch", "--max-states", "0", "-5", "abc", "1", "--max-seconds", "0", "nan", "--html",
        os.path.join(tmp, "out.html"), "/proc/nope/x.html", "--json", "--no-checker", "--verbose", "-q", "--help",
        "--unknown", "--progress"]
bad = 0
for i in range(args.n):
    argv = ["check"] + random.sample(targets, 1) + random.sample(opts, random.randint(0, 4))
    if random.random() < 0.15:
        argv = random.sample(["prove", "native", "check", "bogus", "--check", "--help"], random.randint(0, 3))
    r = subprocess.run([sys.executable, "-m", "warpsched"] + argv, capture_output=True, text=True, timeout=120)
    err = r.stderr + r.stdout
    if "Traceback" in err and "src/warpsched" in err.split("Traceback", 1)[1]:
        bad += 1
        print("TRACEBACK", argv, r.returncode); print(err[-1500:]); print("======")
print(f"{args.n} command lines, {bad} with a warpsched traceback")
sys.exit(1 if bad else 0)
