#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# scripts/deps.sh against stand-ins for apt-get, apt-cache, dpkg-query, sudo and clang++ (nothing is
# installed): it waits for a held dpkg lock in a non-English locale and says so, gives up after
# WEIGHTSYNC_APT_LOCK_WAIT, runs apt-get update before asking apt-cache about the libFuzzer
# runtime on a machine without package lists, and fails with WEIGHTSYNC_FUZZ=ON (only) when the
# fuzz dependencies cannot be installed.
#   bash tests/scripts/deps_test.sh    (CTest: scripts.deps)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin=$work/bin
mkdir -p "$bin"
export STUB_STATE=$work/state
mkdir -p "$STUB_STATE"

# apt-get: logs its arguments and locale; "install" fails with the lock message while
# $STUB_STATE/lock_left > 0 (in German unless LC_ALL=C, as apt does), or with another error when
# $STUB_STATE/install_fails exists; "update" makes the package lists known to apt-cache.
cat >"$bin/apt-get" <<'STUB'
#!/usr/bin/env bash
echo "apt-get LC_ALL=${LC_ALL:-} $*" >>"$STUB_STATE/log"
args=" $* "
if [[ "$args" == *" update "* ]]; then touch "$STUB_STATE/lists"; exit 0; fi
left=$(cat "$STUB_STATE/lock_left" 2>/dev/null || echo 0)
if [ "$left" -gt 0 ]; then
  echo $((left - 1)) >"$STUB_STATE/lock_left"
  if [ "${LC_ALL:-}" = C ]; then
    echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (unattended-upgr)" >&2
  else
    echo "E: Sperre /var/lib/dpkg/lock-frontend konnte nicht erlangt werden. Sie wird von Prozess 4242 (unattended-upgr) gehalten." >&2
  fi
  exit 100
fi
if [ -e "$STUB_STATE/install_fails" ]; then echo "E: Unable to locate package $*" >&2; exit 100; fi
exit 0
STUB
# apt-cache show: knows the runtime package only after an update (and only if it exists here).
cat >"$bin/apt-cache" <<'STUB'
#!/usr/bin/env bash
echo "apt-cache $*" >>"$STUB_STATE/log"
[ -e "$STUB_STATE/lists" ] && [ ! -e "$STUB_STATE/no_rt_package" ] && exit 0
exit 100
STUB
# dpkg-query: everything but the libFuzzer runtime is installed.
cat >"$bin/dpkg-query" <<'STUB'
#!/usr/bin/env bash
pkg=${*: -1}
[[ "$pkg" == libclang-rt-* ]] && exit 1
printf 'install ok installed'
STUB
cat >"$bin/clang++" <<'STUB'
#!/usr/bin/env bash
echo "Debian clang version 99.0.1"
STUB
cat >"$bin/sudo" <<'STUB'
#!/usr/bin/env bash
exec "$@"
STUB
chmod +x "$bin"/*
export PATH=$bin:$PATH
export LC_ALL=de_DE.UTF-8 LANG=de_DE.UTF-8 WEIGHTSYNC_APT_LOCK_POLL=0
unset WEIGHTSYNC_SKIP_DEPS WEIGHTSYNC_FUZZ
source "$root/scripts/deps.sh"

fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
reset() { rm -rf "$STUB_STATE"; mkdir -p "$STUB_STATE"; }

echo "== a lock held for two tries, in a German locale: waits, says so, then installs"
reset
echo 2 >"$STUB_STATE/lock_left"
if ws_apt_get install -y foo >"$work/out" 2>&1; then :; else fail "ws_apt_get failed: $(cat "$work/out")"; fi
[ "$(grep -c ' install -y foo' "$STUB_STATE/log")" = 3 ] || fail "expected 3 tries: $(cat "$STUB_STATE/log")"
grep -q "holds the lock; waiting" "$work/out" || fail "no waiting message: $(cat "$work/out")"
grep -v "LC_ALL=C " "$STUB_STATE/log" | grep -q . && fail "apt-get ran without LC_ALL=C: $(cat "$STUB_STATE/log")"

echo "== a lock held for good: gives up after WEIGHTSYNC_APT_LOCK_WAIT, with the lock's status"
reset
echo 1000000 >"$STUB_STATE/lock_left"
rc=0
WEIGHTSYNC_APT_LOCK_WAIT=2 WEIGHTSYNC_APT_LOCK_POLL=1 ws_apt_get install -y foo >"$work/out" 2>&1 || rc=$?
[ "$rc" = 100 ] || fail "expected status 100 after giving up, got $rc"
grep -q "gave up" "$work/out" || fail "no give-up message: $(cat "$work/out")"

echo "== another error: no retry"
reset
touch "$STUB_STATE/install_fails"
rc=0
ws_apt_get install -y foo >"$work/out" 2>&1 || rc=$?
[ "$rc" = 100 ] || fail "expected status 100, got $rc"
[ "$(grep -c ' install ' "$STUB_STATE/log")" = 1 ] || fail "retried a non-lock error: $(cat "$STUB_STATE/log")"

echo "== fuzz deps on a machine without package lists: update, then install the runtime"
reset
if WEIGHTSYNC_FUZZ=ON ws_install_fuzz_deps >"$work/out" 2>&1; then :; else fail "ws_install_fuzz_deps failed: $(cat "$work/out")"; fi
update=$(grep -n "apt-get .* update" "$STUB_STATE/log" | head -1 | cut -d: -f1)
install=$(grep -n "apt-get .* install .*libclang-rt-99-dev" "$STUB_STATE/log" | head -1 | cut -d: -f1)
[ -n "$update" ] && [ -n "$install" ] && [ "$update" -lt "$install" ] ||
  fail "expected apt-get update before installing libclang-rt-99-dev: $(cat "$STUB_STATE/log")"

echo "== fuzz deps that cannot be installed: an error with WEIGHTSYNC_FUZZ=ON, a note with AUTO"
reset
touch "$STUB_STATE/install_fails"
rc=0
WEIGHTSYNC_FUZZ=ON ws_install_fuzz_deps >"$work/out" 2>&1 || rc=$?
[ "$rc" != 0 ] || fail "WEIGHTSYNC_FUZZ=ON: a failed install returned 0"
rc=0
WEIGHTSYNC_FUZZ=AUTO ws_install_fuzz_deps >"$work/out" 2>&1 || rc=$?
[ "$rc" = 0 ] || fail "WEIGHTSYNC_FUZZ=AUTO: a failed install returned $rc"
grep -q "no fuzz tests" "$work/out" || fail "AUTO: no note: $(cat "$work/out")"

if [ "$fails" -gt 0 ]; then
  echo "$fails check(s) failed" >&2
  exit 1
fi
echo "all deps.sh checks passed"
