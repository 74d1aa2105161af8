#!/usr/bin/env bash
# real_launcher.sh symmem-run|mpirun|torchrun BUILD_DIR SOURCE_DIR
# The same small job (tests/launch/small_job.py and symmem-bench -e 64K, both checking their
# results) under a real launcher with 2 ranks. Exit 77 (skipped) when the launcher is missing.
set -euo pipefail
kind=$1 build=$2 src=$3
py=${PYTHON:-python3}
export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}
job=$src/tests/launch/small_job.py
bench=$build/tools/bench/symmem-bench
bench_args=(--backend host --op all -b 4 -e 64K -f 4 -n 3 -w 1)
# A MASTER_PORT with MASTER_PORT+1 free too: rank 0 hosts symmem's store on MASTER_PORT+1.
port=$("$py" - <<'PYEOF'
import random, socket
for _ in range(200):
    p = random.randrange(20000, 32000)
    try:
        with socket.socket() as a, socket.socket() as b:
            a.bind(("127.0.0.1", p))
            b.bind(("127.0.0.1", p + 1))
        print(p)
        break
    except OSError:
        pass
PYEOF
)
case $kind in
  symmem-run)
    run=("$build/tools/run/symmem-run" -n 2 --timeout 120 --)
    "${run[@]}" "$py" "$job"
    "${run[@]}" "$bench" "${bench_args[@]}" ;;
  mpirun)
    command -v mpirun > /dev/null || { echo "skipped: mpirun is not installed (openmpi-bin)"; exit 77; }
    run=(mpirun --allow-run-as-root --oversubscribe -np 2 -x MASTER_ADDR=127.0.0.1
         -x MASTER_PORT="$port" -x PYTHONPATH -x SYMMEM_TIMEOUT_MS=120000)
    "${run[@]}" "$py" "$job"
    "${run[@]}" "$bench" "${bench_args[@]}" ;;
  torchrun)
    "$py" -c 'import torch.distributed.run' 2> /dev/null ||
      { echo "skipped: torch is not installed (torchrun)"; exit 77; }
    # Not --standalone: it picks its own port, whose +1 may be taken (symmem's store).
    run=("$py" -m torch.distributed.run --nnodes 1 --node-rank 0 --nproc-per-node 2
         --master-addr 127.0.0.1 --master-port "$port")
    "${run[@]}" "$job"
    "${run[@]}" --no-python "$bench" "${bench_args[@]}" ;;
  *) echo "real_launcher.sh: unknown launcher '$kind'" >&2; exit 2 ;;
esac
