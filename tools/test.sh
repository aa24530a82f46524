#!/usr/bin/env bash
# The README's test command: install pydoca (editable, builds softdoca and the
# cffi module) with its test extras, then run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -e '.[test]'
python3 -m pytest "$@"
