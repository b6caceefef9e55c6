#!/usr/bin/env bash
# Set up (or reuse) .venv, start the local stack, create a LoadBalancer Service and show its EXTERNAL-IP.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_DEFAULT_REGION=us-east-1
exec .venv/bin/python -m devstack.demo 2>"${DEMO_LOG:-/tmp/ccm-demo.log}"
