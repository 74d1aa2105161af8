#!/bin/sh
# as_launcher.sh torchrun|ompi|slurm PROGRAM [ARGS...]
# Run under symmem-run: rewrites the rank's environment into what the named launcher would set
# (no SYMMEM_* layout variables, no SYMMEM_STORE; MASTER_ADDR/MASTER_PORT kept, so rank 0 hosts
# the store), then executes PROGRAM.
set -eu
kind=$1
shift
r=$RANK n=$WORLD_SIZE lr=$LOCAL_RANK ln=$LOCAL_WORLD_SIZE
unset SYMMEM_RANK SYMMEM_WORLD_SIZE SYMMEM_LOCAL_RANK SYMMEM_LOCAL_WORLD_SIZE SYMMEM_STORE
case $kind in
  torchrun) ;;
  ompi)
    unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE
    export OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=$n
    export OMPI_COMM_WORLD_LOCAL_RANK=$lr OMPI_COMM_WORLD_LOCAL_SIZE=$ln ;;
  slurm)
    unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE
    export SLURM_PROCID=$r SLURM_NTASKS=$n SLURM_LOCALID=$lr ;;
  *) echo "as_launcher.sh: unknown launcher '$kind'" >&2; exit 2 ;;
esac
exec "$@"
