#!/usr/bin/env bash
# What is known about a variant lives on its ladder row (kernels/): the
# server, the clients and the bench ask the registry for a role, a lesson or
# a limit, never for a name. Fails naming each string literal, in C++ under
# server/, client/ and bench/ or in the Python client, outside tests, that is
# the name of a variant the ladders register. The bench's scripts, like the
# docs, may name variants: they are what an operator runs.
set -uo pipefail
root=${1:?usage: variant_names_test.sh REPO_ROOT}
cd "$root"
names=$(grep -ohE '\.name = "[A-Za-z0-9_]+"' kernels/cuda/*/ladder.cc kernels/cpu/*.cc |
        sed -E 's/.*"(.*)"/\1/' | sort -u)
if [ -z "$names" ]; then
  echo "variant names: no .name rows found in the ladder sources"
  exit 1
fi
alternatives=$(echo "$names" | paste -sd'|')
hits=$( (grep -rnE "\"(${alternatives})\"" server client bench \
            --include='*.cc' --include='*.h' --include='*.cu' --include='*.cuh'
          grep -rnE "[\"'](${alternatives})[\"']" client/python --include='*.py') |
       grep -vE '^[^:]*/tests/')
if [ -n "$hits" ]; then
  echo "variant names: a variant named outside kernels/ (give its ladder row a role," \
       "a lesson or a limit, and ask the registry):"
  echo "$hits" | sed 's/^/  /'
  exit 1
fi
echo "variant names: ok ($(echo "$names" | wc -l) names checked)"
