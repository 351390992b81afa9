#!/bin/sh
# Installs what agentd's sandboxes need from Debian's packages when it is missing: gVisor's runsc,
# bubblewrap, socat (the gateway relay inside an isolated sandbox), e2fsprogs and mount (the
# per-sandbox disk image). With `--test` it also
# installs Chromium, which the state chart's browser test drives, openssl, which makes the skills
# test's throwaway CA, strace (the freezer test) and curl (a real client through the egress proxy). Only as root on Debian;
# otherwise it says what to install and goes on (the server then refuses to start without an
# isolating driver, and says why).
set -u
missing=""
command -v bwrap >/dev/null 2>&1 || missing="$missing bubblewrap"
command -v runsc >/dev/null 2>&1 || missing="$missing runsc"
command -v socat >/dev/null 2>&1 || missing="$missing socat"
# Each sandbox's disk is an ext4 image, made with mkfs.ext4 and loop-mounted (see sandbox/volume.ts).
PATH="$PATH:/usr/sbin:/sbin"
command -v mkfs.ext4 >/dev/null 2>&1 || missing="$missing e2fsprogs"
command -v losetup >/dev/null 2>&1 || missing="$missing mount"
if [ "${1:-}" = "--test" ]; then
  [ -x /usr/bin/chromium ] || missing="$missing chromium"
  command -v openssl >/dev/null 2>&1 || missing="$missing openssl"
  # The freezer test traces a loop with strace, as gVisor's sentry traces its stubs.
  command -v strace >/dev/null 2>&1 || missing="$missing strace"
  command -v curl >/dev/null 2>&1 || missing="$missing curl"
  # The region tests mount LiteFS (FUSE): fusermount3 comes with fuse3.
  command -v fusermount3 >/dev/null 2>&1 || missing="$missing fuse3"
fi
# A current runsc, built from gVisor's Go module (its buildable `go` branch) at a recorded
# pseudo-version, wherever a Go toolchain is here and we are root (AGENTD_BUILD_RUNSC=0 skips it).
# agentd then prefers it to Debian's (of 2022, ptrace only): see sandbox/gvisor/runsc-binary.ts.
# Built once per version into /usr/local/lib/agentd/runsc-<version>/, linked as
# /usr/local/lib/agentd/runsc: 63 s here from an empty Go cache (133 MB of modules from the proxy),
# seconds with Go's module cache. A failed build leaves Debian's runsc in use, and says so.
RUNSC_MODULE_VERSION=v0.0.0-20260905035102-160fafc42237
build_runsc() {
  [ "${AGENTD_BUILD_RUNSC:-1}" = "0" ] && return 0
  go=$(command -v go 2>/dev/null || { [ -x /usr/local/go/bin/go ] && echo /usr/local/go/bin/go; })
  [ -n "$go" ] && [ "$(id -u)" = "0" ] || return 0
  dir=/usr/local/lib/agentd/runsc-$RUNSC_MODULE_VERSION
  if [ ! -x "$dir/runsc" ]; then
    echo "agentd: building runsc from gvisor.dev/gvisor@$RUNSC_MODULE_VERSION" >&2
    mkdir -p "$dir.building" && \
      GOBIN="$dir.building" GOFLAGS=-mod=mod CGO_ENABLED=0 nice -n 10 "$go" install "gvisor.dev/gvisor/runsc@$RUNSC_MODULE_VERSION" >"$dir.building/build.log" 2>&1 && \
      echo "$RUNSC_MODULE_VERSION" > "$dir.building/VERSION" && rm -rf "$dir" && mv "$dir.building" "$dir" \
      || { echo "agentd: could not build runsc (see $dir.building/build.log); Debian's stays in use" >&2; return 0; }
  fi
  ln -sfn "$dir/runsc" /usr/local/lib/agentd/runsc
}
build_runsc
# LiteFS, which replicates the database across a region's nodes (docs/region.md), built from its Go
# module at a recorded version for the region tests (`--test`) or with AGENTD_BUILD_LITEFS=1:
# /usr/local/lib/agentd/litefs. 22 s here from an empty Go cache. A server uses it only when run under
# `litefs mount` (any LiteFS binary: the Fly image takes the release's).
LITEFS_MODULE_VERSION=v0.5.14
build_litefs() {
  [ "${1:-}" = "--test" ] || [ "${AGENTD_BUILD_LITEFS:-}" = "1" ] || return 0
  go=$(command -v go 2>/dev/null || { [ -x /usr/local/go/bin/go ] && echo /usr/local/go/bin/go; })
  [ -n "$go" ] && [ "$(id -u)" = "0" ] || return 0
  dir=/usr/local/lib/agentd/litefs-$LITEFS_MODULE_VERSION
  if [ ! -x "$dir/litefs" ]; then
    echo "agentd: building litefs from github.com/superfly/litefs@$LITEFS_MODULE_VERSION" >&2
    mkdir -p "$dir.building" && \
      GOBIN="$dir.building" GOFLAGS=-mod=mod CGO_ENABLED=0 nice -n 10 "$go" install "github.com/superfly/litefs/cmd/litefs@$LITEFS_MODULE_VERSION" >"$dir.building/build.log" 2>&1 && \
      echo "$LITEFS_MODULE_VERSION" > "$dir.building/VERSION" && rm -rf "$dir" && mv "$dir.building" "$dir" \
      || { echo "agentd: could not build litefs (see $dir.building/build.log)" >&2; return 0; }
  fi
  ln -sfn "$dir/litefs" /usr/local/lib/agentd/litefs
}
build_litefs "${1:-}"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "agentd: installing$missing from Debian's packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  # A fresh machine has no package lists yet: update only when the first try cannot find them.
  { apt-get install -y -qq --no-install-recommends $missing || { apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing; }; } >/dev/null 2>&1 \
    || echo "agentd: could not install$missing" >&2
else
  echo "agentd: please install$missing (apt-get install -y$missing)" >&2
fi
exit 0
