# shellcheck shell=bash
# The MPS daemon of gpu-check.sh and gpu-tests.sh (sourced by both). They run their ranks under a
# daemon they start themselves, and leave the machine as they found it: where a daemon was running
# before they started, a fresh one runs when they end (a script that times several ranks on one
# GPU next needs one, or its ranks time-slice the GPU); where none was, none is left.
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"

# mps_quit [SECONDS]: asks the daemon to quit (nothing when none runs).
mps_quit() {
  echo quit | timeout "${1:-10}" nvidia-cuda-mps-control > /dev/null 2>&1
}

# 1 when a daemon was running when this file was sourced. The control daemon and its server both
# have the process name nvidia-cuda-mps (the kernel keeps 15 characters of a name).
MPS_FOUND_UP=0
pgrep -x nvidia-cuda-mps > /dev/null 2>&1 && MPS_FOUND_UP=1

# mps_restart [SECONDS]: quits the daemon (waiting up to SECONDS), then starts a fresh one.
mps_restart() {
  mps_quit "${1:-10}"
  sleep 1
  nvidia-cuda-mps-control -d > /dev/null 2>&1
  sleep 1
}

# mps_leave_as_found: quits the script's daemon, then starts one again where one was found.
mps_leave_as_found() {
  if ((MPS_FOUND_UP)); then
    mps_restart 15
  else
    mps_quit 15
  fi
}
