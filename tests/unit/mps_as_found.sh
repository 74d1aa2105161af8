#!/usr/bin/env bash
# scripts/gpu-check.sh and scripts/gpu-tests.sh leave MPS as they found it (scripts/lib/mps.sh):
# with no daemon before, none after; with one before, one after (a fresh one). Runs both scripts
# without a GPU and with nothing to test, against a fake nvidia-cuda-mps-control first on PATH:
# `-d` starts a "daemon" (a copy of sleep with the real daemon's process name), `echo quit | ...`
# stops it. Skipped (77) where a real MPS daemon runs (this test would see it) or procps is missing.
set -u
src=${1:?usage: mps_as_found.sh SOURCE_DIR}
for t in pgrep pkill ps; do
  command -v $t > /dev/null 2>&1 || { echo "SKIP: $t is not installed (procps)"; exit 77; }
done
running() {  # live processes named nvidia-cuda-mps (the kernel keeps 15 characters of a name)
  ps -eo stat=,comm= | awk '$1 !~ /^Z/ && $2 == "nvidia-cuda-mps"' | wc -l
}
[ "$(running)" -eq 0 ] || { echo "SKIP: an MPS daemon is running on this machine"; exit 77; }

tmp=$(mktemp -d)
daemon=$tmp/d/nvidia-cuda-mps-control
# shellcheck disable=SC2317  # called by the trap
cleanup() { pkill -f "$daemon" > /dev/null 2>&1; rm -rf "$tmp"; }
trap cleanup EXIT
mkdir -p "$tmp/bin" "$tmp/d" "$tmp/build"
cp "$(command -v sleep)" "$daemon"
cat > "$tmp/bin/nvidia-cuda-mps-control" << FAKE
#!/usr/bin/env bash
if [ "\${1:-}" = -d ]; then
  echo start >> "$tmp/log"
  nohup "$daemon" 600 > /dev/null 2>&1 &
  exit 0
fi
read -r cmd
pgrep -f "$daemon" > /dev/null || exit 1
echo "\$cmd" >> "$tmp/log"
[ "\$cmd" = quit ] && pkill -f "$daemon"
for _ in \$(seq 50); do pgrep -f "$daemon" > /dev/null || exit 0; sleep 0.1; done
FAKE
chmod +x "$tmp/bin/nvidia-cuda-mps-control"
export PATH="$tmp/bin:$PATH"

# settle: waits (up to 5 s) until N live fake daemons run; prints that count.
settle() {
  for _ in $(seq 50); do [ "$(running)" -eq "$1" ] && break; sleep 0.1; done
  running
}
failed=0
check() {  # check NAME WANT COMMAND...: runs a script, then compares the live daemons with WANT
  local name=$1 want=$2
  shift 2
  : > "$tmp/log"
  "$@" > "$tmp/$name.out" 2>&1
  local got
  got=$(settle "$want")
  if [ "$got" -eq "$want" ]; then
    echo "ok: $name: $got daemon(s) after (calls: $(tr '\n' ' ' < "$tmp/log"))"
  else
    echo "FAIL: $name: $got daemon(s) after, want $want (calls: $(tr '\n' ' ' < "$tmp/log"))"
    tail -5 "$tmp/$name.out"
    failed=1
  fi
}
tests=(env GPU_CHECK_BUILD_DIR="$tmp/build" bash "$src/scripts/gpu-tests.sh" "$tmp/gt")
check=(env GPU_CHECK_ONLY=none GPU_CHECK_BUILD_DIR="$tmp/build" bash "$src/scripts/gpu-check.sh"
  "$tmp/gc")
# found N: leaves N (0 or 1) fake daemons running, whatever the check before left.
found() {
  echo quit | nvidia-cuda-mps-control > /dev/null 2>&1
  [ "$(settle 0)" -eq 0 ] || { echo "FAIL: the fake daemon did not stop"; exit 1; }
  if (($1)); then
    nvidia-cuda-mps-control -d
    [ "$(settle 1)" -eq 1 ] || { echo "FAIL: the fake daemon did not start"; exit 1; }
  fi
}
for n in 0 1; do
  found $n
  check "gpu-tests_found_$n" $n "${tests[@]}"
  found $n
  check "gpu-check_found_$n" $n "${check[@]}"
done
exit $failed
