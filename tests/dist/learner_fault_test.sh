#!/usr/bin/env bash
# A data-parallel Learner job that loses a rank: rank 1 of 2 raises SIGKILL on itself in the middle
# of epoch 2. Checks that the job ends within the bound (mpirun sees the dead rank and stops the
# other with a message naming it, instead of rank 0 waiting in its all_reduce), that the last
# checkpoint on disk is epoch 1's and complete, and that restarts on 3 ranks and on 1 resume from
# it and end where one uninterrupted process ends. Then a step function that throws on one rank
# only: the job must end (Learner -> MPI_Abort), not hang.
#
#   learner_fault_test.sh LEARNER_RUN MPIRUN
#
# Every command runs under `timeout`; exit 77 (CTest's skip code) when mpirun is missing.
set -u
run=$1
mpirun=${2:-mpirun}
bound=60  # seconds per command; a hang shows as exit status 124
if ! command -v "$mpirun" > /dev/null; then
  echo "learner_fault_test skipped: no mpirun ($mpirun; apt-get install openmpi-bin)"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln_learner_fault.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*"
  for log in "$work"/*.log; do
    [ -f "$log" ] && { echo "--- $log"; cat "$log"; }
  done
  exit 1
}
# 4 steps per epoch (384 examples, global batch 96); step 6 is in epoch 2.
common=(--epochs 3 --global-batch 96 --examples 384)
mpi=("$mpirun" --oversubscribe)
# Open MPI refuses root without this (CTest also sets OMPI_ALLOW_RUN_AS_ROOT*; run by hand, too).
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)

timeout $bound "$run" train --dir "$work/reference" "${common[@]}" > "$work/reference.log" 2>&1 ||
  fail "the uninterrupted 1-process run failed"

start=$(date +%s)
timeout $bound "${mpi[@]}" -np 2 "$run" train --dir "$work/run" "${common[@]}" \
  --kill-rank 1 --kill-step 6 > "$work/killed.log" 2>&1
rc=$?
elapsed=$(($(date +%s) - start))
[ $rc -eq 124 ] && fail "the job with a killed rank did not end within ${bound} s (a hang)"
[ $rc -eq 0 ] && fail "the job with a killed rank exited 0"
grep -q "SIGKILL in step 6" "$work/killed.log" || fail "rank 1 did not reach its kill"
grep -q "exited on signal 9" "$work/killed.log" || fail "mpirun did not report the killed rank"
echo "killed rank: job ended in ${elapsed} s with status $rc; mpirun said:"
grep "exited on signal 9" "$work/killed.log"

timeout $bound "$run" check "$work/run/last.safetensors" --epoch 1 > "$work/check.log" 2>&1 ||
  fail "the last checkpoint is not epoch 1's complete checkpoint"
cat "$work/check.log"
cp -r "$work/run" "$work/run1"

timeout $bound "${mpi[@]}" -np 3 "$run" train --dir "$work/run" "${common[@]}" \
  > "$work/resume3.log" 2>&1 || fail "resuming on 3 ranks failed"
grep -q "resumed at epoch 1 step 4 on 3 ranks" "$work/resume3.log" || fail "3 ranks did not resume"
grep -q "done: epoch 3 step 12 on 3 ranks" "$work/resume3.log" || fail "3 ranks did not finish"
timeout $bound "$run" train --dir "$work/run1" "${common[@]}" > "$work/resume1.log" 2>&1 ||
  fail "resuming on 1 process failed"
grep -q "resumed at epoch 1 step 4 on 1 ranks" "$work/resume1.log" || fail "1 rank did not resume"
# f32 tolerance: the world sizes sum each step's gradient in different orders (see
# tests/dist/learner_test.cc); 12 steps keep the weights within 1e-5.
for dir in run run1; do
  timeout $bound "$run" compare "$work/reference/last.safetensors" "$work/$dir/last.safetensors" \
    --tol 1e-5 > "$work/compare.log" 2>&1 || fail "the resumed run ($dir) differs from the reference"
  cat "$work/compare.log"
done

timeout $bound "${mpi[@]}" -np 2 "$run" train --dir "$work/throw" "${common[@]}" \
  --throw-rank 1 --throw-step 3 > "$work/throw.log" 2>&1
rc=$?
[ $rc -eq 124 ] && fail "the job whose rank 1 threw did not end within ${bound} s (a hang)"
[ $rc -eq 0 ] && fail "the job whose rank 1 threw exited 0"
grep -q "rank 1 throws in step 3" "$work/throw.log" || fail "rank 1's error is not reported"
grep -q "cannot learn of this error" "$work/throw.log" || fail "no MPI_Abort message"
echo "throwing rank: job ended with status $rc"
echo "PASS"
