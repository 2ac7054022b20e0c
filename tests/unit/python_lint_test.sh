#!/usr/bin/env bash
# pyflakes over every Python file of the repository (the client package, its
# tests, bench/ and tests/ scripts, scripts/soak): unused imports, undefined
# names, f-strings without placeholders. Debian's pyflakes3, which
# scripts/setup installs.
set -uo pipefail
root=${1:?usage: python_lint_test.sh REPO_ROOT}
cd "$root"
if ! command -v pyflakes3 > /dev/null; then
  echo "python_lint: pyflakes3 is missing (Debian's pyflakes3; scripts/setup installs it)"
  exit 1
fi
mapfile -t files < <(git ls-files '*.py' 2>/dev/null || find . -name '*.py' -not -path './build*')
files+=(scripts/soak)
pyflakes3 "${files[@]}"
