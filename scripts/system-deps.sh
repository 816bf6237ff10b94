#!/usr/bin/env bash
# System packages the test layers and benchmarks need (Java for Spark; prometheus, chromium for their layers;
# redis-server for the central-limiter baseline of the shared-limit benchmark).
# Installs what is missing when run as root with apt-get; otherwise says what is missing and moves on
# (the layers that need a missing binary are then skipped with that reason, never silently passed).
set -u
need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing system packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
    || echo "warning: could not install ${need[*]}; the tests that need them will be skipped" >&2
else
  echo "note: missing system packages (${need[*]}); run as root or install them to run every test layer" >&2
fi
exit 0
