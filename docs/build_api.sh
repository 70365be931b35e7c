#!/usr/bin/env bash
# Regenerate the API reference (docs/api/warpsched.html) from the docstrings with pdoc.
#   .venv/bin/pip install -e '.[docs]' && bash docs/build_api.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
"$PY" -m pdoc --no-search --no-show-source --docformat restructuredtext -o docs/api warpsched
rm -f docs/api/index.html
echo "wrote docs/api/warpsched.html"
