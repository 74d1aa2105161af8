#!/usr/bin/env bash
# Checks that the git-tracked C/C++/CUDA sources under src include python/src tools tests bench
# follow .clang-format (`clang-format --dry-run --Werror`); prints the files that do not
# and exits 1 if there is any (2 if clang-format is missing). Run from anywhere in the tree.
#   bash scripts/check-format.sh          check (CI runs this before building, see .ci/run)
#   bash scripts/check-format.sh --fix    reformat those files in place (clang-format -i)
# CLANG_FORMAT picks the binary. The tree is formatted with clang-format 14 (Debian 12's);
# another major version may format some lines differently, so the check says when it is not 14.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=check
case "${1:-}" in
  "") ;;
  --fix) mode=fix ;;
  *) echo "usage: $0 [--fix]" >&2; exit 2 ;;
esac

CF=${CLANG_FORMAT:-}
if [ -z "$CF" ]; then
  for c in clang-format clang-format-14; do
    if command -v "$c" > /dev/null; then CF=$c; break; fi
  done
fi
if [ -z "$CF" ] || ! command -v "$CF" > /dev/null; then
  echo "check-format: clang-format not found (apt-get install clang-format, or bash scripts/deps.sh;" \
       "CLANG_FORMAT names another binary)" >&2
  exit 2
fi
version=$("$CF" --version)
major=$(echo "$version" | sed -nE 's/.*version ([0-9]+)\..*/\1/p')
if [ "$major" != "14" ]; then
  echo "check-format: note: $version; the tree is formatted with clang-format 14, so lines may" \
       "differ only because of the version" >&2
fi

files=()
while IFS= read -r -d '' f; do
  files+=("$f")
done < <(git ls-files -z -- src include python/src tools tests bench \
           | grep -zE '\.(c|cc|cpp|cxx|h|hh|hpp|hxx|cu|cuh)$')
if [ ${#files[@]} -eq 0 ]; then
  echo "check-format: no sources found (not a git checkout?)" >&2
  exit 2
fi

if [ "$mode" = fix ]; then
  "$CF" -i -- "${files[@]}"
  echo "check-format: reformatted ${#files[@]} files with $CF ($version)"
  exit 0
fi

# One run over every file (xargs batches them); a file that differs gets "FILE:LINE:COL: ...
# [-Wclang-format-violations]" lines on stderr.
rc=0
out=$(printf '%s\0' "${files[@]}" | xargs -0 "$CF" --dry-run --Werror -- 2>&1) || rc=$?
if [ "$rc" -ne 0 ]; then
  bad=$(printf '%s\n' "$out" | sed -nE 's/^(.+):[0-9]+:[0-9]+: (warning|error): .*-Wclang-format-violations.*/\1/p' \
        | sort -u)
  if [ -z "$bad" ]; then  # clang-format itself failed (a bad .clang-format, say)
    printf '%s\n' "$out" | head -40 >&2
    echo "check-format: $CF failed (exit $rc)" >&2
    exit 1
  fi
  echo "check-format: $(printf '%s\n' "$bad" | wc -l) of ${#files[@]} files differ from" \
       ".clang-format ($version):" >&2
  printf '%s\n' "$bad" | sed 's/^/  /' >&2
  echo "The first differences:" >&2
  printf '%s\n' "$out" | head -40 >&2
  echo "Fix: bash scripts/check-format.sh --fix (or clang-format -i FILE...)" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files follow .clang-format ($CF, version $major)"
