# Sourced by scripts/gpu-check.sh and scripts/gpu-tests.sh: summary rows of a ctest log.
# shellcheck shell=bash
case_counts() {  # rank 0's per-case counts of test #$2 in a ctest -V log (gtest's, pytest's lines)
  local log=$1 n=$2 g p
  g=$(grep -E "^$n: (\[0\] )?\[  (PASSED|SKIPPED|FAILED) *\] [0-9]+ tests?" "$log" |
        sed -E 's/.*\[  (PASSED|SKIPPED|FAILED) *\] ([0-9]+) .*/\1 \2/' | tr 'A-Z' 'a-z' |
        awk '!seen[$0]++' | paste -sd, -)
  p=$(grep -E "^$n: (\[0\] )?=* *[0-9]+ (passed|failed|skipped|error)" "$log" | tail -1 |
        sed -E "s/^$n: (\[0\] )?=* *//; s/ in [0-9.]+s.*//")
  echo "${g:+gtest rank 0: $g}${g:+${p:+; }}${p:+pytest rank 0: $p}"
}
ctest_rows() {  # per-test rows from a ctest log (-V: with each test's case counts)
  local log=$1 prefix=$2
  [ -f "$log" ] || return 0
  grep -E 'Test +#[0-9]+: ' "$log" | sed -E 's/^ *[0-9]+\/[0-9]+ +//' | while read -r line; do
    local tname tstatus tsec tnum
    tnum=$(echo "$line" | sed -E 's/^Test +#([0-9]+):.*/\1/')
    tname=$(echo "$line" | sed -E 's/^Test +#[0-9]+: ([^ ]+).*/\1/')
    tstatus=$(echo "$line" | sed -E 's/.*(Passed|\*\*\*Failed|\*\*\*Skipped|\*\*\*Timeout|\*\*\*Not Run|\*\*\*Exception|Subprocess aborted|Not Run|Skipped|Failed).*/\1/' | tr -d '*')
    tsec=$(echo "$line" | grep -oE '[0-9.]+ sec' | cut -d' ' -f1)
    echo "$prefix$tname|$tstatus|${tsec:-?}|$(case_counts "$log" "$tnum")"
  done
}
