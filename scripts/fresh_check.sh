#!/usr/bin/env bash
# shellcheck disable=SC2317  # functions run through stage, trap and chroot look unreachable
# Fresh-machine check: proves that the README's opening commands work on a bare Debian 12.
#
# Makes a minimal Debian 12 root (`debootstrap --variant=minbase bookworm`, with the mirror and the
# apt sources of this machine: updates and security included), clones the commit under test (this
# checkout's HEAD; uncommitted changes are not tested) into it and runs, as root inside the root,
# exactly the commands of the README's first code block, one stage per line: installing git and
# make, `git clone <repository-url> kiln && cd kiln` (the placeholder becomes a bare repository
# in the root holding the commit), `make demo` (DEMO_EPOCHS=1 unless --epochs) and `make test`.
# With --bazel it then runs CI's Bazel stage in the clone: `scripts/install_deps.sh --bazel`, and
# `bazel test //...` with no network (a private network namespace with only loopback). Nothing is
# installed in the root beforehand: a package missing from scripts/install_deps.sh fails here.
# The commit is fixed when the check starts: commits made while it runs are not tested.
#
# Usage: scripts/fresh_check.sh [options]          (as root; .ci/run runs it with --bazel)
#   --bazel          also run CI's Bazel stage in the root (after the README's commands)
#   --epochs N       DEMO_EPOCHS for `make demo` (default 1)
#   --work DIR       the root, logs and lock live in DIR (default /var/tmp/kiln-fresh);
#                    DIR/root is removed first if a previous run left it
#   --cache DIR      host folder of the caches bind-mounted into the root (default
#                    /var/cache/kiln-fresh): ccache, Bazel's --disk_cache, apt's and debootstrap's
#                    downloaded .deb files, pip's downloaded wheels (scripts/make_venv.sh, run by
#                    `make test`). They change no result, only the time.
#   --no-cache       no caches: every stage cold
#   --mirror URL     Debian mirror for debootstrap (default: the first bookworm URI of
#                    /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list)
#   --keep           keep the root afterwards (its mounts are undone either way)
#   --budget MIN     the summary says whether the whole run took under MIN minutes
#   -h, --help       this text
#
# Prints each stage's time and a summary: the stage table, then (with --bazel) Bazel's test
# count, CTest's line, and CTest's closing count line last. Stages are also logged in
# WORK/logs/. The exit status is the first failed stage's: a failure before the first `make`
# stops the run; later stages still run. Mounts are undone on every exit path (trap, and all
# of it runs in a private mount namespace); processes left in the root (a Bazel server) are
# ended. Run it with `nice -n 19` on a shared machine. Costs: docs/fresh_check.md.
set -euo pipefail
# All of the script is one compound command, read before it runs: editing this file while a
# check runs does not change that check.
{
SCRIPT="$(readlink -f "${BASH_SOURCE[0]}")"
REPO="$(cd "$(dirname "$SCRIPT")/.." && pwd)"

usage() { sed -n '3,/^set -euo/p' "$SCRIPT" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "fresh_check: $*" >&2; exit 2; }

# ---- Options --------------------------------------------------------------------------------
BAZEL=0 EPOCHS=1 KEEP=0 BUDGET=0 MIRROR="" WORK=/var/tmp/kiln-fresh CACHE=/var/cache/kiln-fresh
ORIG_ARGS=("$@")
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bazel) BAZEL=1 ;;
    --epochs) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || die "--epochs needs a positive number"
              EPOCHS="$2"; shift ;;
    --work) [[ $# -ge 2 ]] || die "--work needs a folder"; WORK="$2"; shift ;;
    --cache) [[ $# -ge 2 ]] || die "--cache needs a folder"; CACHE="$2"; shift ;;
    --no-cache) CACHE="" ;;
    --mirror) [[ $# -ge 2 ]] || die "--mirror needs a URL"; MIRROR="$2"; shift ;;
    --keep) KEEP=1 ;;
    --budget) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || die "--budget needs minutes"
              BUDGET="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "fresh_check: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

# ---- Host checks ----------------------------------------------------------------------------
if [[ "$(id -u)" -ne 0 ]]; then
  die "must run as root (debootstrap, mount and chroot need it): sudo $0 ${ORIG_ARGS[*]}"
fi
for tool in chroot mount umount unshare flock git; do
  command -v "$tool" >/dev/null || die "needs '$tool' on this machine"
done
# All mounts below live in a private mount namespace: even a killed run leaves none behind.
if [[ -z "${KILN_FRESH_MOUNT_NS:-}" ]]; then
  export KILN_FRESH_MOUNT_NS=1
  exec unshare --mount --propagation private "$SCRIPT" "${ORIG_ARGS[@]}"
fi
if ! command -v debootstrap >/dev/null; then
  echo "fresh_check: debootstrap is missing on this machine: apt-get install debootstrap"
  if ! command -v apt-get >/dev/null ||
     ! { apt-get update -q -o DPkg::Lock::Timeout=600 </dev/null &&
         DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=600 \
           debootstrap </dev/null; }; then
    die "debootstrap is not installed and could not be installed (apt-get install debootstrap)"
  fi
fi
WORK="$(readlink -m "$WORK")"
[[ -z "$CACHE" ]] || CACHE="$(readlink -m "$CACHE")"
case "$WORK/" in
  "$REPO"/*) die "--work $WORK is inside the repository: use a folder outside it" ;;
  /|/bin/*|/boot/*|/dev/*|/etc/*|/lib*|/proc/*|/sys/*|/usr/*) die "--work $WORK: not there" ;;
esac
if [[ -n "$CACHE" ]]; then
  case "$CACHE/" in
    "$REPO"/*) die "--cache $CACHE is inside the repository: use a folder outside it" ;;
    "$WORK"/*) die "--cache $CACHE is inside --work $WORK (removed on each run)" ;;
  esac
fi

# The commit under test: this checkout's HEAD.
SHA="$(git -C "$REPO" rev-parse --verify HEAD)"
BRANCH="$(git -C "$REPO" symbolic-ref --quiet --short HEAD || true)"
if [[ -n "$(git -C "$REPO" status --porcelain --untracked-files=no)" ]]; then
  echo "fresh_check: warning: uncommitted changes in $REPO are not tested (HEAD ${SHA:0:12} is)"
fi
README_TEXT="$(git -C "$REPO" show "$SHA:README.md")" || die "no README.md in HEAD ${SHA:0:12}"

# The mirror: this machine's own Debian sources (no host name is written into the repository).
SOURCE_FILES=()
for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
  if [[ -s "$f" ]] && grep -qE '^[[:space:]]*(deb[[:space:]]|Types:)' "$f"; then
    SOURCE_FILES+=("$f")
  fi
done
if [[ -z "$MIRROR" ]]; then
  for f in "${SOURCE_FILES[@]}"; do
    if [[ "$f" == *.sources ]]; then
      # deb822: the first stanza whose Types has deb and whose Suites has bookworm.
      MIRROR="$(awk '
        function flush() { if (deb && suite && uri != "" && out == "") out = uri; deb = suite = 0; uri = "" }
        /^[[:space:]]*$/ { flush(); next }
        /^Types:/  { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
        /^URIs:/   { uri = $2 }
        /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == "bookworm") suite = 1 }
        END { flush(); print out }' "$f")"
    else
      # one-line style: deb [option=value ...] URI SUITE COMPONENT...
      MIRROR="$(awk '$1 == "deb" { i = 2
                                    if ($i ~ /^\[/) { while (i < NF && $i !~ /\]$/) i++; i++ }
                                    if ($(i + 1) == "bookworm") { print $i; exit } }' "$f")"
    fi
    [[ -z "$MIRROR" ]] || break
  done
fi
[[ -n "$MIRROR" ]] || die "no bookworm mirror in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list: pass --mirror URL"
[[ ${#SOURCE_FILES[@]} -gt 0 ]] || die "no Debian apt sources on this machine to give the root"

# The README's first code block: the commands under test.
mapfile -t README_CMDS < <(printf '%s\n' "$README_TEXT" | awk '
  /^```/ { if (inside) exit; inside = 1; next }
  inside && $0 !~ /^[[:space:]]*(#|$)/ { print }')
[[ ${#README_CMDS[@]} -gt 0 ]] || die "README.md has no first code block with commands"
printf '%s\n' "${README_CMDS[@]}" | grep -q '<repository-url>' ||
  die "the README's first code block has no 'git clone <repository-url> ...' line to clone with"

# ---- Work folder, lock, logs ----------------------------------------------------------------
mkdir -p "$WORK"
free_gb=$(($(df -Pk "$WORK" | awk 'NR == 2 { print $4 }') / 1024 / 1024))
[[ $free_gb -ge 15 ]] || die "only ${free_gb} GB free in $WORK: the root needs about 15 GB (--work DIR)"
exec 9>"$WORK/lock"
flock -n 9 || die "another fresh check is using $WORK (lock $WORK/lock)"
ROOT="$WORK/root"
LOGS="$WORK/logs"
rm -rf "$LOGS"
mkdir -p "$LOGS"
CHROOT_CACHE=/var/cache/kiln-fresh  # where the caches appear inside the root

# Mounts under $ROOT, deepest first (from this namespace's mount table).
mounts_under_root() {
  awk -v root="$ROOT" '{ p = $5; gsub(/\\040/, " ", p); if (p == root || index(p, root "/") == 1) print p }' \
    /proc/self/mountinfo | awk '{ print length($0), $0 }' | sort -rn | cut -d' ' -f2-
}
# Processes whose root directory is inside $ROOT: only the ones this check started there.
root_pids() {
  local p link
  for p in /proc/[0-9]*; do
    link="$(readlink "$p/root" 2>/dev/null)" || continue
    if [[ "$link" == "$ROOT" || "$link" == "$ROOT"/* ]]; then echo "${p#/proc/}"; fi
  done
}
end_root_processes() {
  local pids
  mapfile -t pids < <(root_pids)
  [[ ${#pids[@]} -gt 0 ]] || return 0
  echo "fresh_check: ending ${#pids[@]} process(es) left in the root: ${pids[*]}"
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    mapfile -t pids < <(root_pids)
    [[ ${#pids[@]} -gt 0 ]] || return 0
    sleep 1
  done
  kill -KILL "${pids[@]}" 2>/dev/null || true
  sleep 1
}
unmount_root() {
  local m
  while read -r m; do
    [[ -n "$m" ]] || continue
    umount "$m" 2>/dev/null || umount "$m" || echo "fresh_check: could not unmount $m" >&2
  done < <(mounts_under_root)
}
remove_root() {
  [[ -e "$ROOT" ]] || return 0
  end_root_processes
  unmount_root
  if [[ -n "$(mounts_under_root)" ]]; then
    echo "fresh_check: not removing $ROOT: still mounted there: $(mounts_under_root | tr '\n' ' ')" >&2
    return 1
  fi
  rm -rf --one-file-system "$ROOT"
}

# ---- Stages ---------------------------------------------------------------------------------
STAGE_NAMES=() STAGE_SECS=() STAGE_RCS=() STAGE_PID="" STAGE_NOW="" STAGE_START=0
FIRST_RC=0 FIRST_STAGE="" RUN_START=$SECONDS

fmt_secs() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
banner() { printf '\n======== %s ========\n' "$*"; }

record_stage() {  # NAME SECONDS RC
  STAGE_NAMES+=("$1") STAGE_SECS+=("$2") STAGE_RCS+=("$3")
  if [[ $3 -ne 0 && $FIRST_RC -eq 0 ]]; then FIRST_RC=$3 FIRST_STAGE="$1"; fi
}
# stage NAME COMMAND...: runs COMMAND with its output on stdout and in LOGS/NN-slug.log. It runs
# as a job of its own process group (set -m below), so that an exit in the middle ends all of it.
stage() {
  local name="$1" n slug rc
  shift
  n=$(printf '%02d' $((${#STAGE_NAMES[@]} + 1)))
  slug="$(printf '%s' "$name" | tr -c 'A-Za-z0-9' '_' | cut -c1-40)"
  banner "$name"
  STAGE_NOW="$name" STAGE_START=$SECONDS
  rm -f "$LOGS/.rc"
  set +e
  { set +e; ( set -e; "$@" ); echo $? >"$LOGS/.rc"; } </dev/null 2>&1 | tee "$LOGS/$n-$slug.log" &
  STAGE_PID=$!
  wait "$STAGE_PID"
  set -e
  STAGE_PID="" STAGE_NOW=""
  rc="$(cat "$LOGS/.rc" 2>/dev/null || echo 1)"
  record_stage "$name" $((SECONDS - STAGE_START)) "$rc"
  echo "---- $name: $(fmt_secs $((SECONDS - STAGE_START))), exit $rc"
  return "$rc"
}
# Ends the stage that is running (its whole process group), when the check exits in the middle.
end_running_stage() {
  local pgid
  [[ -n "$STAGE_PID" ]] && kill -0 "$STAGE_PID" 2>/dev/null || return 0
  pgid="$(awk '{ print $5 }' "/proc/$STAGE_PID/stat" 2>/dev/null)" || return 0
  echo "fresh_check: ending the running stage '$STAGE_NOW' (process group $pgid)"
  kill -TERM -- "-$pgid" 2>/dev/null || true
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    kill -0 -- "-$pgid" 2>/dev/null || break
    sleep 1
  done
  kill -KILL -- "-$pgid" 2>/dev/null || true
  record_stage "$STAGE_NOW (interrupted)" $((SECONDS - STAGE_START)) 143
}

summary() {
  local i status total=$((SECONDS - RUN_START))
  banner "summary"
  echo "commit ${SHA:0:12}${BRANCH:+ ($BRANCH)}; root $ROOT; mirror from ${SOURCE_FILES[*]}"
  for i in "${!STAGE_NAMES[@]}"; do
    status=ok
    [[ ${STAGE_RCS[$i]} -eq 0 ]] || status="FAILED (exit ${STAGE_RCS[$i]})"
    printf '  %8s  %-58s %s\n' "$(fmt_secs "${STAGE_SECS[$i]}")" "${STAGE_NAMES[$i]}" "$status"
  done
  printf '  %8s  %s\n' "$(fmt_secs "$total")" "total"
  if [[ $BUDGET -gt 0 ]]; then
    if [[ $total -le $((BUDGET * 60)) ]]; then
      echo "fresh_check: $(fmt_secs "$total") is within the budget of $BUDGET minutes"
    else
      echo "fresh_check: warning: $(fmt_secs "$total") is OVER the budget of $BUDGET minutes"
    fi
  fi
  if [[ $FIRST_RC -ne 0 ]]; then
    echo "fresh_check: FAILED: first failure '$FIRST_STAGE' (exit $FIRST_RC); logs in $LOGS"
  fi
  local ctest_line bazel_line
  ctest_line="$(cat "$LOGS"/*.log 2>/dev/null |
    grep -E 'tests passed, [0-9]+ tests? failed out of [0-9]+' | tail -1 || true)"
  if [[ $BAZEL -eq 1 ]]; then
    bazel_line="$(cat "$LOGS"/*bazel*.log 2>/dev/null |
      grep -E '^Executed [0-9]+ out of [0-9]+ tests?' | tail -1 || true)"
    echo "bazel: ${bazel_line:-no summary line}"
  fi
  echo "ctest: ${ctest_line:-no summary line}"
  # CTest's closing line last: it is the run's overall count.
  [[ -z "$ctest_line" ]] || echo "$ctest_line"
}

on_exit() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  end_running_stage
  if [[ -e "$ROOT" ]]; then
    end_root_processes
    unmount_root
    if [[ $KEEP -eq 1 ]]; then
      echo "fresh_check: kept $ROOT (mounts undone; look inside with: chroot $ROOT /bin/bash)"
    else
      remove_root
    fi
  fi
  summary
  [[ $FIRST_RC -eq 0 ]] || rc=$FIRST_RC
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
set -m  # every stage a job of its own process group (see stage)

# Runs a bash script inside the root as root, with a login-like environment and no stdin.
ROOT_ENV=(HOME=/root USER=root LOGNAME=root SHELL=/bin/bash TERM="${TERM:-dumb}"
          PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
          DEBIAN_FRONTEND=noninteractive CI=true DEMO_EPOCHS="$EPOCHS")
# This machine's way to PyPI (an index mirror, a proxy), where it has one.
for var in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST http_proxy https_proxy no_proxy \
           HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [[ -z "${!var:-}" ]] || ROOT_ENV+=("$var=${!var}")
done
if [[ -n "$CACHE" ]]; then
  # base_dir: paths under /root are hashed relative, so entries are reused across clones.
  ROOT_ENV+=(CCACHE_DIR="$CHROOT_CACHE/ccache" CCACHE_BASEDIR=/root CCACHE_MAXSIZE=20G
            PIP_CACHE_DIR="$CHROOT_CACHE/pip")
fi
in_root() {
  chroot "$ROOT" /usr/bin/env -i "${ROOT_ENV[@]}" /bin/bash -c "$1" </dev/null
}
# The same with no network: a private network namespace with only loopback (Bazel's client
# talks to its server over 127.0.0.1).
in_root_offline() {
  unshare --net /bin/bash -c 'ip link set lo up && exec "$@"' bash \
    chroot "$ROOT" /usr/bin/env -i "${ROOT_ENV[@]}" /bin/bash -c "$1" </dev/null
}
# A README line runs in the folder the previous one ended in (a `cd` carries over).
CWD_FILE=/tmp/fresh_check_cwd
SOURCE_REPO=/srv/kiln.git  # the commit under test, in the root
readme_line() {
  in_root "cd \"\$(cat $CWD_FILE)\" || exit 1
$1
rc=\$?; pwd >$CWD_FILE; exit \$rc"
}

# ---- 1. The root ----------------------------------------------------------------------------
echo "fresh_check: commit ${SHA:0:12}${BRANCH:+ ($BRANCH)}; root $ROOT; mirror $MIRROR${CACHE:+; caches $CACHE}"
if [[ -e "$ROOT" ]]; then
  echo "fresh_check: removing the root a previous run left: $ROOT"
  remove_root || die "could not remove $ROOT"
fi

DEBOOTSTRAP_ARGS=(--variant=minbase)
if [[ -n "$CACHE" ]]; then
  mkdir -p "$CACHE/debootstrap" "$CACHE/apt/partial" "$CACHE/ccache" "$CACHE/bazel" "$CACHE/pip"
  DEBOOTSTRAP_ARGS+=(--cache-dir="$CACHE/debootstrap")
fi
# apt in minbase fetches https only with the CA certificates a real install has.
[[ "$MIRROR" != https:* ]] || DEBOOTSTRAP_ARGS+=(--include=ca-certificates)
stage "debootstrap minbase bookworm" \
  debootstrap "${DEBOOTSTRAP_ARGS[@]}" bookworm "$ROOT" "$MIRROR"

setup_root() {
  set -e
  # This machine's Debian sources (bookworm, updates, security), nothing else.
  rm -f "$ROOT/etc/apt/sources.list"
  for f in "${SOURCE_FILES[@]}"; do
    mkdir -p "$ROOT$(dirname "$f")"
    cp "$f" "$ROOT$f"
    echo "apt source: $f"
  done
  cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
  # This machine's local trust anchors (a TLS-inspecting proxy's CA, say), like its mirror and
  # resolver: without them pip cannot reach PyPI from the root where this machine can. The
  # ca-certificates package (scripts/install_deps.sh) adds them to the root's bundle when it
  # installs; if debootstrap already included it, they are added now.
  if compgen -G "/usr/local/share/ca-certificates/*" >/dev/null; then
    mkdir -p "$ROOT/usr/local/share/ca-certificates"
    cp -rL /usr/local/share/ca-certificates/. "$ROOT/usr/local/share/ca-certificates/"
    echo "local CA certificates: $(cd /usr/local/share/ca-certificates && echo *)"
    if [[ -x "$ROOT/usr/sbin/update-ca-certificates" ]]; then
      chroot "$ROOT" /usr/sbin/update-ca-certificates
    fi
  fi
  # No services start inside a chroot (the usual policy-rc.d of build roots).
  printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
  chmod 755 "$ROOT/usr/sbin/policy-rc.d"
  # The root is a mount point of its own, as / is on a machine: `ip netns exec` (tests/dist's
  # two-host test) remounts / as a slave and fails in a chroot whose / is a plain folder.
  mount --bind "$ROOT" "$ROOT"
  mount -t proc proc "$ROOT/proc"
  mount --bind /sys "$ROOT/sys"
  mount --bind /dev "$ROOT/dev"
  mount --bind /dev/pts "$ROOT/dev/pts"
  mount --bind /dev/shm "$ROOT/dev/shm"
  echo "mounted the root on itself, /proc, /sys, /dev, /dev/pts, /dev/shm"
  if [[ -n "$CACHE" ]]; then
    mount --bind "$CACHE/apt" "$ROOT/var/cache/apt/archives"
    for c in ccache bazel pip; do
      mkdir -p "$ROOT$CHROOT_CACHE/$c"
      mount --bind "$CACHE/$c" "$ROOT$CHROOT_CACHE/$c"
    done
    if [[ $BAZEL -eq 1 ]]; then
      # The user's own Bazel settings, outside the repository: build actions may come from the
      # disk cache, test results may not (every test runs).
      printf '%s\n' "build --disk_cache=$CHROOT_CACHE/bazel" "test --nocache_test_results" \
        >"$ROOT/root/.bazelrc"
    fi
    echo "caches: $CACHE/{apt,ccache,bazel,pip} on $CHROOT_CACHE in the root"
  fi
  # The commit under test (SHA, fixed at the start: later commits are not tested) in a bare
  # repository that the README's `git clone` line clones.
  local branch="${BRANCH:-main}"
  git init -q --bare "$ROOT$SOURCE_REPO"
  git -C "$REPO" push -q --no-verify "$ROOT$SOURCE_REPO" "$SHA:refs/heads/$branch"
  git -C "$ROOT$SOURCE_REPO" symbolic-ref HEAD "refs/heads/$branch"
  echo "commit under test: $SHA as branch $branch of $SOURCE_REPO in the root"
  echo /root >"$ROOT$CWD_FILE"
}
stage "root setup (apt sources, mounts, ${SHA:0:12} in $SOURCE_REPO)" setup_root

# ---- 2. The README's commands ---------------------------------------------------------------
made=0
for cmd in "${README_CMDS[@]}"; do
  run="${cmd//<repository-url>/$SOURCE_REPO}"
  name="${cmd%%[[:space:]]#*}"
  name="${name%"${name##*[![:space:]]}"}"
  [[ "$name" != make\ demo* ]] || name="$name (DEMO_EPOCHS=$EPOCHS)"
  [[ "$cmd" != make\ * ]] || made=1
  if ! stage "$name" readme_line "$run" && [[ $made -eq 0 ]]; then
    exit "$FIRST_RC"  # nothing after it can run
  fi
  if [[ "$cmd" == *'<repository-url>'* ]]; then
    got="$(in_root "cd \"\$(cat $CWD_FILE)\" && git rev-parse HEAD" 2>&1)" || true
    [[ "$got" == "$SHA" ]] ||
      die "after '$name' the folder is not a clone of ${SHA:0:12} (git rev-parse HEAD: $got)"
  fi
done

# ---- 3. CI's Bazel stage --------------------------------------------------------------------
if [[ $BAZEL -eq 1 ]]; then
  stage "scripts/install_deps.sh --bazel" readme_line "scripts/install_deps.sh --bazel" || true
  if command -v ip >/dev/null; then
    stage "bazel test //... (offline)" in_root_offline "cd \"\$(cat $CWD_FILE)\" || exit 1
bazel test //...
rc=\$?; bazel shutdown; exit \$rc" || true
  else
    echo "fresh_check: no 'ip' on this machine to bring up loopback offline: Bazel runs with the network"
    stage "bazel test //..." readme_line "bazel test //...
rc=\$?; bazel shutdown; exit \$rc" || true
  fi
fi
exit "$FIRST_RC"
}
