#!/usr/bin/env bash
# The measurement patches of bench/patches (README there) still apply to this tree: each is
# checked with `git apply --check` against the sources, which it does not change. A patch that
# no longer applies fails the test, naming the file and git's reason. Skipped (77) without git.
set -u
src=${1:?usage: patches_apply.sh SOURCE_DIR}
command -v git > /dev/null 2>&1 || { echo "SKIP: git is not installed"; exit 77; }
shopt -s nullglob
patches=("$src"/bench/patches/*.patch)
[ ${#patches[@]} -gt 0 ] || { echo "FAIL: no patches under $src/bench/patches"; exit 1; }
failed=0
for p in "${patches[@]}"; do
  if out=$(cd "$src" && git apply --check "$p" 2>&1); then
    echo "ok: $(basename "$p")"
  else
    echo "FAIL: $(basename "$p") no longer applies to $src:"
    echo "$out"
    failed=1
  fi
done
exit $failed
