#!/bin/bash
# Every relative link of the project's Markdown resolves (docs_links.py says
# what is checked). Needs only python3.
set -eu
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
exec python3 "$(dirname "$0")/docs_links.py" "${GIANT_SOURCE_DIR:-$(dirname "$0")/../..}"
