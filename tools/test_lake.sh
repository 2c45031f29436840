#!/usr/bin/env bash
# The lake store and the oldest supported DuckDB, in a second virtual environment (.venv-lake):
# tracekit[lake] pins DuckDB 1.5.5 (the version of the offline DuckLake extension packages), so
# this is also where tracekit is tested on DuckDB 1.x. Run after the main test command (it reads
# .venv's snapshot of stored rows). Needs PostgreSQL's server binaries (Debian: postgresql) for the
# PostgreSQL-catalog tests, which skip, saying so, without them.
#
#   1. every bundled sample (and the ../shared corpus when present) stores exactly the same rows
#      on DuckDB 1.5.5 as on .venv's DuckDB (tools/store_rows.py, all columns of every table);
#   2. the lake tests: SQLite and PostgreSQL catalogs, local and S3 (moto) data, concurrent writers.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-lake
.venv-lake/bin/pip install -q -e '.[lake,lake-test,ray]'
roots=(sample_traces)
if [ -d ../shared/corpus ]; then roots+=(../shared/corpus); fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
.venv/bin/python tools/store_rows.py snapshot "$out/main.json" "${roots[@]}" > "$out/main.log"
.venv-lake/bin/python tools/store_rows.py snapshot "$out/lake.json" "${roots[@]}" > "$out/lake.log"
versions="DuckDB $(.venv/bin/python -c 'import duckdb; print(duckdb.__version__)') vs $(.venv-lake/bin/python -c 'import duckdb; print(duckdb.__version__)')"
if ! same=$(.venv/bin/python tools/store_rows.py compare "$out/main.json" "$out/lake.json"); then
    echo "$versions: stored rows differ:"; echo "$same"; exit 1
fi
echo "$versions: $same"
.venv-lake/bin/python -m pytest -p no:cacheprovider tests/test_lake.py tests/test_lake_url.py tests/test_ingest_ray.py \
    tests/test_ci_workflow_lake.py
