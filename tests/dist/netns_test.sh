#!/usr/bin/env bash
# Two "hosts" on one machine: the 2-rank data-parallel Learner run with each rank in a network
# namespace of its own, joined by a veth pair, so every byte between the ranks crosses a network
# link as between two machines. mpirun runs in namespace A with a hostfile of the two addresses;
# for the second it starts Open MPI's daemon (orted) through --mca plm_rsh_agent, a script that
# does what ssh would: `ip netns exec B` (with its own UTS namespace, so the "host" also has its
# own name). --mca btl tcp,self (no shared memory) and btl_tcp_if_include / oob_tcp_if_include on
# the veth's network make MPI's data and mpirun's control traffic use the veth.
#
# Checks: the run ends, its rank 1 ran in namespace B, its weights match a one-process run within
# 1e-5 (the tolerance of tests/dist/learner_test.cc), and the veth carried at least the gradients'
# bytes of every step.
#
#   netns_test.sh LEARNER_RUN MPIRUN
#
# Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), `ip` (iproute2) and `unshare` (util-linux); exits 77
# (CTest's skip code) without them. Addresses 198.18.0.1-2/30 (RFC 2544's benchmarking range)
# exist only inside the two namespaces; nothing outside them is contacted. Everything is removed
# on exit (trap), and every command is bounded by `timeout`.
set -u
run=$1
mpirun=${2:-mpirun}
bound=60
skip() {
  echo "netns_test skipped: $*"
  exit 77
}
[ "$(id -u)" -eq 0 ] || skip "not root: creating network namespaces needs CAP_SYS_ADMIN"
command -v ip > /dev/null || skip "no ip command (apt-get install iproute2)"
command -v unshare > /dev/null || skip "no unshare command (util-linux)"
command -v "$mpirun" > /dev/null || skip "no mpirun ($mpirun; apt-get install openmpi-bin)"

ns_a=kiln_a_$$
ns_b=kiln_b_$$
veth_a=kva$$
veth_b=kvb$$
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln_netns.XXXXXX")
cleanup() {
  for ns in "$ns_b" "$ns_a"; do
    if ip netns list | grep -qw "$ns"; then
      # Anything of this test still running in the namespace (it holds nothing else).
      for pid in $(ip netns pids "$ns"); do kill -9 "$pid" 2> /dev/null; done
      ip netns del "$ns"  # takes the veth end in it, and so the pair, with it
    fi
  done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for log in "$work"/*.log; do
    [ -f "$log" ] && { echo "--- $log"; cat "$log"; }
  done
  exit 1
}

if ! ip netns add "$ns_a" 2> "$work/netns.log"; then
  skip "cannot create a network namespace ($(cat "$work/netns.log"))"
fi
# `ip netns exec` remounts / and /sys: in a chroot whose / is not a mount point it cannot.
if ! ip netns exec "$ns_a" true 2> "$work/netns.log"; then
  skip "ip netns exec does not work here, e.g. a chroot whose / is not a mount point" \
    "($(tr '\n' ' ' < "$work/netns.log"))"
fi
ip netns add "$ns_b" || fail "ip netns add $ns_b"
ip link add "$veth_a" type veth peer name "$veth_b" || fail "ip link add veth"
ip link set "$veth_a" netns "$ns_a" || fail "moving $veth_a"
ip link set "$veth_b" netns "$ns_b" || fail "moving $veth_b"
ip -n "$ns_a" addr add 198.18.0.1/30 dev "$veth_a" || fail "address A"
ip -n "$ns_b" addr add 198.18.0.2/30 dev "$veth_b" || fail "address B"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up || fail "lo up in $ns"; done
ip -n "$ns_a" link set "$veth_a" up || fail "$veth_a up"
ip -n "$ns_b" link set "$veth_b" up || fail "$veth_b up"

# What ssh would do for "host" 198.18.0.2: run mpirun's command line in namespace B.
cat > "$work/agent.sh" << EOF
#!/bin/sh
# plm_rsh_agent: agent.sh HOST COMMAND...
shift
exec ip netns exec $ns_b unshare --uts sh -c "hostname kiln-b && \$*"
EOF
chmod +x "$work/agent.sh"
printf '198.18.0.1 slots=1\n198.18.0.2 slots=1\n' > "$work/hosts"

common=(--epochs 3 --global-batch 96 --examples 384)
timeout $bound "$run" train --dir "$work/reference" "${common[@]}" > "$work/reference.log" 2>&1 ||
  fail "the 1-process reference run failed"

# ip netns exec mounts the namespace's own /sys.
bytes() {
  ip netns exec "$ns_a" sh -c "echo \$((\$(cat /sys/class/net/$veth_a/statistics/tx_bytes) + \
    \$(cat /sys/class/net/$veth_a/statistics/rx_bytes)))"
}
before=$(bytes)
net=198.18.0.0/30
timeout $bound ip netns exec "$ns_a" unshare --uts sh -c 'hostname kiln-a && exec "$@"' sh \
  "$mpirun" --allow-run-as-root --hostfile "$work/hosts" -np 2 --mca plm_rsh_agent "$work/agent.sh" \
  --mca btl tcp,self --mca btl_tcp_if_include $net --mca oob_tcp_if_include $net \
  -x KILN_NUM_THREADS "$run" train --dir "$work/run" "${common[@]}" > "$work/mpirun.log" 2>&1
rc=$?
[ $rc -eq 124 ] && fail "the two-namespace run did not end within ${bound} s"
[ $rc -eq 0 ] || fail "the two-namespace run failed with status $rc"
after=$(bytes)
grep -q "done: epoch 3 step 12 on 2 ranks" "$work/mpirun.log" || fail "the run did not finish"
grep -q "rank 0 of 2 on kiln-a" "$work/mpirun.log" || fail "rank 0 did not run in namespace A"
grep -q "rank 1 of 2 on kiln-b" "$work/mpirun.log" || fail "rank 1 did not run in namespace B"
timeout $bound "$run" compare "$work/reference/last.safetensors" "$work/run/last.safetensors" \
  --tol 1e-5 > "$work/compare.log" 2>&1 || fail "the two-namespace run differs from one process"
cat "$work/compare.log"
# 12 steps x the MLP's 8*32 + 32 + 32*4 + 4 = 420 f32 gradients each way at least.
min=$((12 * 420 * 4 * 2))
crossed=$((after - before))
echo "veth $veth_a carried $crossed bytes (at least $min: 12 steps of gradients both ways)"
[ "$crossed" -ge "$min" ] || fail "only $crossed bytes crossed the veth"
echo "PASS"
