#!/bin/sh
# Installs what agentd's sandboxes need from Debian's packages when it is missing: gVisor's runsc,
# bubblewrap, and socat (the gateway relay inside an isolated sandbox). Only as root on Debian;
# otherwise it says what to install and goes on, because agentd falls back to a weaker driver.
set -u
missing=""
command -v bwrap >/dev/null 2>&1 || missing="$missing bubblewrap"
command -v runsc >/dev/null 2>&1 || missing="$missing runsc"
command -v socat >/dev/null 2>&1 || missing="$missing socat"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "agentd: installing$missing from Debian's packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  { apt-get install -y -qq $missing || { apt-get update -qq && apt-get install -y -qq $missing; }; } >/dev/null 2>&1 \
    || echo "agentd: could not install$missing; sandboxes fall back to a weaker driver" >&2
else
  echo "agentd: please install$missing (apt-get install -y$missing); falling back to a weaker sandbox driver" >&2
fi
exit 0
