#!/usr/bin/env bash
# symmem-bench's MoE benchmark verifies its own results ("# OK", or "# FAILED" and exit 1 when a
# row or a sum is wrong): dispatch and combine on 2 ranks, from ordinary memory and from
# symmetric memory (the pull, NOTE [moe pull dispatch]), bf16 and fp8.
# Usage: bench_moe.sh SYMMEM_RUN SYMMEM_BENCH
set -u
run=$1 bench=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for op in moe_dispatch moe_combine; do
  for f in '' --symmetric '--fp8 --symmetric'; do
    # shellcheck disable=SC2086  # $f is zero, one or two flags
    if ! "$run" -n 2 -- "$bench" --op "$op" --tokens 24 --hidden 256 --topk 4 --experts 8 -n 2 \
        $f > "$out" 2>&1 || ! grep -q '# OK' "$out"; then
      cat "$out"
      echo "failed: $op $f"
      exit 1
    fi
  done
done
