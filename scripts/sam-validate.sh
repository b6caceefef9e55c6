#!/usr/bin/env bash
# `sam validate --lint` on template.yaml, guided.yaml (its copy for sam deploy --guided) and their nested application
# observability.yaml when the SAM CLI is installed (it is not a dev dependency: heavy install).
# CI does not depend on it: tests/template runs cfn-lint and the SAM translator offline.
# One-off: python3 -m venv /tmp/samvenv && /tmp/samvenv/bin/pip install aws-sam-cli && SAM=/tmp/samvenv/bin/sam $0
set -euo pipefail
cd "$(dirname "$0")/.."
SAM="${SAM:-$(command -v sam || true)}"
if [[ -z "$SAM" ]]; then
  echo "sam not found (set SAM=/path/to/sam); nothing validated" >&2
  exit 2
fi
export SAM_CLI_TELEMETRY=0
for template in template.yaml guided.yaml observability.yaml; do
  "$SAM" validate --lint --region "${AWS_REGION:-us-east-1}" --template "$template"
done
