#!/usr/bin/env bash
# Podman for the Slurm target's `container = "podman"` tests
# (tests/targets/slurm/test_slurm_functions.py): Debian's podman, installed when missing
# (idempotent). The tests give it a store of their own, load the test image into it
# (`docker save | podman load`) and remove what they made; this script only installs.
#
#   bash tests/harness/podman.sh        # install podman if missing
set -euo pipefail

if command -v podman >/dev/null; then
    echo "podman: $(podman --version 2>/dev/null) is installed" >&2
    exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y --no-install-recommends podman >&2 \
    || { $SUDO apt-get update >&2 && $SUDO apt-get install -y --no-install-recommends podman >&2; }
command -v podman >/dev/null
echo "podman: installed $(podman --version 2>/dev/null)" >&2
