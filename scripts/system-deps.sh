#!/bin/sh
# Installs what agentd's sandboxes need from Debian's packages when it is missing: gVisor's runsc,
# bubblewrap, socat (the gateway relay inside an isolated sandbox), e2fsprogs and mount (the
# per-sandbox disk image), curl (a CLI started ahead fetches its first message). With `--test` it also
# installs Chromium, which the state chart's browser test drives, openssl, which makes the skills
# test's throwaway CA and strace (the freezer test). Only as root on Debian;
# otherwise it says what to install and goes on (the server then refuses to start without an
# isolating driver, and says why).
set -u
missing=""
command -v bwrap >/dev/null 2>&1 || missing="$missing bubblewrap"
command -v runsc >/dev/null 2>&1 || missing="$missing runsc"
command -v socat >/dev/null 2>&1 || missing="$missing socat"
# A Claude Code started ahead in a warm sandbox asks the gateway for its first message with curl.
command -v curl >/dev/null 2>&1 || missing="$missing curl"
# Each sandbox's disk is an ext4 image, made with mkfs.ext4 and loop-mounted (see sandbox/volume.ts).
PATH="$PATH:/usr/sbin:/sbin"
command -v mkfs.ext4 >/dev/null 2>&1 || missing="$missing e2fsprogs"
command -v losetup >/dev/null 2>&1 || missing="$missing mount"
if [ "${1:-}" = "--test" ]; then
  [ -x /usr/bin/chromium ] || missing="$missing chromium"
  command -v openssl >/dev/null 2>&1 || missing="$missing openssl"
  # The freezer test traces a loop with strace, as gVisor's sentry traces its stubs.
  command -v strace >/dev/null 2>&1 || missing="$missing strace"
  # The region tests mount LiteFS (FUSE): fusermount3 comes with fuse3.
  command -v fusermount3 >/dev/null 2>&1 || missing="$missing fuse3"
fi
# A Go program agentd runs beside it, built from its Go module at a recorded version with the Go
# toolchain where there is one and we are root: once per version into
# /usr/local/lib/agentd/<name>-<version>/ (with a VERSION file), linked as /usr/local/lib/agentd/<name>.
# A failed build says so and leaves things as they were.
# Usage: go_install_pinned <name> <package> <version> <what a failure leaves>
go_install_pinned() {
  go=$(command -v go 2>/dev/null || { [ -x /usr/local/go/bin/go ] && echo /usr/local/go/bin/go; })
  [ -n "$go" ] && [ "$(id -u)" = "0" ] || return 0
  dir=/usr/local/lib/agentd/$1-$3
  if [ ! -x "$dir/$1" ]; then
    echo "agentd: building $1 from $2@$3" >&2
    mkdir -p "$dir.building" && \
      GOBIN="$dir.building" GOFLAGS=-mod=mod CGO_ENABLED=0 nice -n 10 "$go" install "$2@$3" >"$dir.building/build.log" 2>&1 && \
      echo "$3" > "$dir.building/VERSION" && rm -rf "$dir" && mv "$dir.building" "$dir" \
      || { echo "agentd: could not build $1 (see $dir.building/build.log)$4" >&2; return 0; }
  fi
  ln -sfn "$dir/$1" "/usr/local/lib/agentd/$1"
}
# A current runsc from gVisor's Go module (its buildable `go` branch) at a pinned pseudo-version
# (AGENTD_BUILD_RUNSC=0 skips it): agentd then prefers it to Debian's (of 2022, ptrace only), see
# sandbox/gvisor/runsc-binary.ts. 63 s here from an empty Go cache (133 MB of modules), seconds with it.
RUNSC_MODULE_VERSION=v0.0.0-20260905035102-160fafc42237
[ "${AGENTD_BUILD_RUNSC:-1}" = "0" ] || go_install_pinned runsc gvisor.dev/gvisor/runsc "$RUNSC_MODULE_VERSION" "; Debian's stays in use"
# LiteFS, which replicates the database across a region's nodes (README, "A region of nodes on
# LiteFS"), for the region tests (`--test`) or with AGENTD_BUILD_LITEFS=1; 22 s here from an empty Go
# cache. A server uses whichever LiteFS runs `litefs mount` for it (the Fly image takes the release's).
LITEFS_MODULE_VERSION=v0.5.14
if [ "${1:-}" = "--test" ] || [ "${AGENTD_BUILD_LITEFS:-}" = "1" ]; then
  go_install_pinned litefs github.com/superfly/litefs/cmd/litefs "$LITEFS_MODULE_VERSION" ""
fi
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
