#!/usr/bin/env bash
# Regenerate the committed Python bindings from xplane.proto (needs: pip install grpcio-tools).
set -euo pipefail
cd "$(dirname "$0")"
python -m grpc_tools.protoc -I. --python_out=. xplane.proto hlo_subset.proto profiler_service.proto
