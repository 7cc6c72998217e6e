#!/usr/bin/env bash
# Sets up everything tidelog needs on a fresh Debian machine: system packages, then .venv.
# Usage: scripts/setup.sh [run|test]   (test also installs what the test suite needs)
# Idempotent: a second run installs nothing and takes about a second.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-run}"

apt_packages=()
if [ "$mode" = test ]; then
  apt_packages+=(kcat openjdk-17-jre-headless)  # Java 17: the Spark tests (tidelog.spark) run a local JVM
  # The cluster tests: a throwaway ZooKeeper per test (tidelog.testing.ZooKeeper runs Debian's jar with
  # java; `zookeeper` ships the jars and no service: its init script is in `zookeeperd`, never installed
  # here) and network partitions between namespaces (ip netns, veth, a bridge, nft drop rules).
  # Debian pins by release, not by name: seen on bookworm (12): zookeeper 3.8.0-11+deb12u2,
  # nftables 1.0.6-2+deb12u2, iproute2 6.1.0-3.
  apt_packages+=(zookeeper nftables iproute2)
  # The web console's browser tests (tests/console): headless Chromium driven by Selenium through Debian's
  # chromedriver (/usr/bin/chromedriver; selenium never downloads a driver). Seen on bookworm (12):
  # chromium and chromium-driver 156.0.8078.108-1~deb12u1.
  apt_packages+=(chromium chromium-driver)
  # The disk-full and power-loss tests (as root): a small tmpfs, ext4 on a loop device (mkfs.ext4,
  # losetup, mount). Seen on bookworm (12): e2fsprogs 1.47.0-2, mount 2.38.1-5+deb12u3.
  apt_packages+=(e2fsprogs mount)
fi

missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

python_bin="${PYTHON:-python3}"
if ! "$python_bin" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "setup: tidelog needs Python >= 3.11 (found $("$python_bin" --version 2>&1)); set PYTHON=..." >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$python_bin" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi

extras=""
[ "$mode" = test ] && extras="[dev,spark]"
stamp=".venv/.installed-${mode}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing tidelog${extras} into .venv"
  .venv/bin/python -m pip install -q -e ".${extras}"
  touch "$stamp"
fi

# quixstreams (the compaction test's stream framework, tests/server/test_quixstreams.py) pins
# confluent-kafka < 2.13 while tidelog's dev tools use a newer one: it gets its own virtualenv.
quix_spec="quixstreams==3.28.1"
quix_stamp=".venv-quix/.installed-${quix_spec}"
if [ "$mode" = test ] && [ ! -f "$quix_stamp" ]; then
  echo "setup: installing ${quix_spec} into .venv-quix"
  [ -x .venv-quix/bin/python ] || "$python_bin" -m venv .venv-quix
  .venv-quix/bin/python -m pip install -q "$quix_spec"
  rm -f .venv-quix/.installed-*
  touch "$quix_stamp"
fi

# faust-streaming (tests/server/test_faust.py) brings its own aiokafka and mode-streaming: its own
# virtualenv too, its Kafka client pinned so that a new aiokafka release does not change what is tested.
faust_spec="faust-streaming==0.15.3 aiokafka==0.14.0"
faust_stamp=".venv-faust/.installed-${faust_spec// /_}"
if [ "$mode" = test ] && [ ! -f "$faust_stamp" ]; then
  echo "setup: installing ${faust_spec} into .venv-faust"
  [ -x .venv-faust/bin/python ] || "$python_bin" -m venv .venv-faust
  # shellcheck disable=SC2086  # the spec is two requirements
  .venv-faust/bin/python -m pip install -q $faust_spec
  rm -f .venv-faust/.installed-*
  touch "$faust_stamp"
fi
