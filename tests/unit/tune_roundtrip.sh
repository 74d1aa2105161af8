#!/usr/bin/env bash
# symmem-tune writes a tuning file; all_reduce with algo auto follows it (the flight recorder's
# metrics lines, SYMMEM_TRACE_FILE, say which algorithm ran); without a file the built-in table
# decides. Usage: tune_roundtrip.sh SYMMEM_RUN SYMMEM_TUNE SYMMEM_BENCH
set -euo pipefail
run=$1 tune=$2 bench=$3
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 1. A real tune on 2 ranks (small sizes, quick) writes one entry for 2 ranks.
"$run" -n 2 -- "$tune" --out "$t/tuning.json" --max-bytes 64K -n 3 > "$t/tune.log" 2>&1 \
  || { cat "$t/tune.log"; fail "symmem-tune failed"; }
python3 - "$t/tuning.json" <<'PY' || fail "the tuning file is not as expected"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["format"] == "symmem-tuning" and j["version"] == 1, j
e = [x for x in j["entries"] if x["key"] == "all_reduce.one_shot_max_bytes"]
assert [x["world"] for x in e] == [2], e
assert e[0]["backend"] == "host" and e[0]["value"] >= 0 and e[0]["signature"].startswith("cpu="), e
# The waits' spin, tuned where 2 ranks do not outnumber the cores (with more, waits do not spin).
import os
s = [x for x in j["entries"] if x["key"] == "wait.spin_us"]
if os.cpu_count() >= 2:
    assert [x["world"] for x in s] == [2] and s[0]["value"] in (0, 5, 20, 50, 200), s
else:
    assert s == [], s
# The host chunk sizes (NOTE [host chunk sizes]): one of the candidates each.
for key in ("all_reduce.piece_bytes", "broadcast.chunk_bytes"):
    c = [x for x in j["entries"] if x["key"] == key]
    assert [x["world"] for x in c] == [2], (key, c)
    assert c[0]["value"] in [k << 10 for k in (32, 64, 128, 256, 512, 1024, 2048)], (key, c)
PY

# 1b. 4 ranks (a reduced grid): the crossover for 2, 3 and 4 ranks, the spin where the ranks do
#     not outnumber the cores, and the earlier file's other entries kept.
"$run" -n 4 -- "$tune" --out "$t/tuning4.json" --max-bytes 8K -n 2 > "$t/tune4.log" 2>&1 \
  || { cat "$t/tune4.log"; fail "symmem-tune on 4 ranks failed"; }
python3 - "$t/tuning4.json" <<'PY' || fail "the 4-rank tuning file is not as expected"
import json, os, sys
e = json.load(open(sys.argv[1]))["entries"]
w = sorted(x["world"] for x in e if x["key"] == "all_reduce.one_shot_max_bytes")
assert w == [2, 3, 4], e
s = sorted(x["world"] for x in e if x["key"] == "wait.spin_us")
assert s == [n for n in (2, 3, 4) if n <= os.cpu_count()], (s, os.cpu_count())
PY

# 2. An entry of 0 for this machine: auto runs a 4 KiB all_reduce as two_shot, and says why.
sig=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["entries"][0]["signature"])' "$t/tuning.json")
python3 - "$t/zero.json" "$sig" <<'PY'
import json, sys
json.dump({"format": "symmem-tuning", "version": 1, "entries": [
    {"backend": "host", "signature": sys.argv[2], "key": "all_reduce.one_shot_max_bytes",
     "world": 2, "value": 0, "measured": "test"},
    {"backend": "host", "signature": sys.argv[2], "key": "wait.spin_us",
     "world": 2, "value": 7, "measured": "test"}]}, open(sys.argv[1], "w"))
PY
algo_of() {  # the algorithm of the first all_reduce in a metrics file
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    if o.get("op") == "all_reduce": print(o.get("algo")); break' "$1"
}
SYMMEM_TUNING_FILE="$t/zero.json" SYMMEM_DEBUG=INFO SYMMEM_DEBUG_SUBSYS=ENV \
  SYMMEM_TRACE_FILE="$t/m1.jsonl" "$run" -n 2 -- "$bench" -b 4K -e 4K -n 2 -w 0 > "$t/b1.log" 2>&1 \
  || { cat "$t/b1.log"; fail "symmem-bench with the tuning file failed"; }
grep -q "tuning: host all_reduce.one_shot_max_bytes for 2 ranks = 0 from $t/zero.json" "$t/b1.log" \
  || { cat "$t/b1.log"; fail "the log does not name the tuning file's entry"; }
[ "$(algo_of "$t/m1.jsonl")" = two_shot ] || fail "auto ran $(algo_of "$t/m1.jsonl"), not two_shot"
grep -q "tuning: host wait.spin_us for 2 ranks = 7 from $t/zero.json" "$t/b1.log" \
  || { cat "$t/b1.log"; fail "the waits did not read the tuning file's spin"; }

# 3. No file: the built-in table (one_shot at 4 KiB on 2 ranks), and the log says so.
HOME="$t/home" XDG_CACHE_HOME="$t/cache" SYMMEM_DEBUG=INFO SYMMEM_DEBUG_SUBSYS=ENV \
  SYMMEM_TRACE_FILE="$t/m2.jsonl" "$run" -n 2 -- "$bench" -b 4K -e 4K -n 2 -w 0 > "$t/b2.log" 2>&1 \
  || { cat "$t/b2.log"; fail "symmem-bench without a tuning file failed"; }
grep -q "tuning: host all_reduce.one_shot_max_bytes for 2 ranks: built-in table (no tuning file)" \
  "$t/b2.log" || { cat "$t/b2.log"; fail "the log does not say the built-in table decided"; }
[ "$(algo_of "$t/m2.jsonl")" = one_shot ] || fail "auto ran $(algo_of "$t/m2.jsonl"), not one_shot"
# 4. Ranks that read different files would run different algorithms: both refuse the op,
#    naming the disagreement, instead of waiting for each other (NOTE [inline all-reduce]).
if HOME="$t/home" XDG_CACHE_HOME="$t/cache" ZERO="$t/zero.json" "$run" -n 2 -- bash -c \
  '[ "$SYMMEM_RANK" = 1 ] && export SYMMEM_TUNING_FILE=$ZERO; exec "$0" -b 4K -e 4K -n 2 -w 0' \
  "$bench" > "$t/b3.log" 2>&1; then
  cat "$t/b3.log"; fail "ranks with different tuning files ran the op"
fi
grep -q "chose another all_reduce algorithm" "$t/b3.log" \
  || { cat "$t/b3.log"; fail "the disagreement is not named"; }
# 5. A broadcast chunk entry on one rank only: the root's chunks decide (they travel with the
#    first one), so the result is right either way round, and the log names the entry used.
python3 - "$t/chunk.json" "$sig" <<'PY'
import json, sys
json.dump({"format": "symmem-tuning", "version": 1, "entries": [
    {"backend": "host", "signature": sys.argv[2], "key": "broadcast.chunk_bytes",
     "world": 2, "value": 4096, "measured": "test"}]}, open(sys.argv[1], "w"))
PY
for chunked in 0 1; do
  if ! HOME="$t/home" XDG_CACHE_HOME="$t/cache" CHUNK="$t/chunk.json" CHUNKED=$chunked \
    SYMMEM_DEBUG=INFO SYMMEM_DEBUG_SUBSYS=ENV "$run" -n 2 -- bash -c \
    '[ "$SYMMEM_RANK" = "$CHUNKED" ] && export SYMMEM_TUNING_FILE=$CHUNK
     exec "$0" --op broadcast -b 4K -e 1M -f 4 -n 2 -w 0' "$bench" > "$t/b5.log" 2>&1; then
    cat "$t/b5.log"; fail "broadcast with a chunk entry on rank $chunked only failed"
  fi
  grep -q "OK: 0 wrong" "$t/b5.log" || { cat "$t/b5.log"; fail "broadcast not verified"; }
  grep -q "tuning: host broadcast.chunk_bytes for 2 ranks = 4096 from $t/chunk.json" "$t/b5.log" \
    || { cat "$t/b5.log"; fail "the log does not name the broadcast chunk entry"; }
done
echo "tune_roundtrip: OK"
