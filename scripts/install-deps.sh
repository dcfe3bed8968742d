#!/usr/bin/env bash
# Installs what Bellows needs on Debian 12, as root: Debian packages, then
# MPICH 4.0.2 (ch3:nemesis, which supports dynamic processes) built from
# Debian's own source package into a prefix the project owns.
# Idempotent: packages already present and an MPICH already built are skipped.
#
#   BELLOWS_DEPS_PREFIX   where Bellows-owned dependencies live (default /opt/bellows-deps)
set -euo pipefail

prefix_root="${BELLOWS_DEPS_PREFIX:-/opt/bellows-deps}"
mpich_version="4.0.2"
mpich_prefix="${prefix_root}/mpich-${mpich_version}-ch3"
log() { printf 'install-deps: %s\n' "$*"; }

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates dpkg-dev
  libopenblas-dev liblapacke-dev
  libscalapack-mpich-dev libmpich-dev mpich
  libhwloc-dev
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libpmix-dev
  # TeamLB's graph partitioner (runtime_client/teams)
  libmetis-dev
  # The simulator (sim/): SimGrid 3.32's S4U API (actors, hosts, links, platform XML)
  libsimgrid-dev
  libzmq3-dev cppzmq-dev
  python3 python3-matplotlib procps
  # A real Slurm on this host (scripts/local-slurm) and the SPANK plugin's header; none of
  # them depends on Open MPI (apt-cache depends --recurse --no-recommends shows no openmpi)
  slurmctld slurmd slurmdbd slurm-client munge mariadb-server libslurm-dev
  # Its nodes as separate hosts: network namespaces, veth pairs and a bridge (ip); nsenter
  # and unshare come with util-linux
  iproute2 util-linux
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # munge and mariadb-server start their system-wide daemons on install: keep them from
  # doing so (scripts/local-slurm runs private ones), unless a policy is already in place.
  policy_rc=/usr/sbin/policy-rc.d
  own_policy_rc=0
  if [[ ! -e "${policy_rc}" ]]; then
    printf '#!/bin/sh\n# installed by Bellows install-deps.sh while it runs\nexit 101\n' > "${policy_rc}"
    chmod 755 "${policy_rc}"
    own_policy_rc=1
  fi
  status=0
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } || status=$?
  if ((own_policy_rc)); then rm -f "${policy_rc}"; fi
  ((status == 0)) || exit "${status}"
else
  log "Debian packages already installed"
fi

# Debian's mpich/libmpich-dev must not decide what "mpicc"/"mpiexec" mean for
# Bellows; everything in the project points at ${mpich_prefix} explicitly.

if [[ -x "${mpich_prefix}/bin/mpiexec" && -f "${mpich_prefix}/.bellows-complete" ]]; then
  log "MPICH ${mpich_version} (ch3:nemesis) already in ${mpich_prefix}"
  exit 0
fi

log "building MPICH ${mpich_version} (ch3:nemesis) into ${mpich_prefix} (about 7 minutes on 2 cores)"
work="$(mktemp -d /tmp/bellows-mpich.XXXXXX)"
trap 'rm -rf "${work}"' EXIT

# A private APT configuration that adds the deb-src twin of the system's
# bookworm sources, so the system configuration stays untouched.
mkdir -p "${work}/apt/lists/partial" "${work}/apt/sources"
for f in /etc/apt/sources.list.d/*.sources; do
  [[ -f "$f" ]] || continue
  sed 's/^Types:.*/Types: deb-src/' "$f" > "${work}/apt/sources/$(basename "$f")"
done
if [[ -f /etc/apt/sources.list ]]; then
  sed -n 's/^deb /deb-src /p' /etc/apt/sources.list > "${work}/apt/sources/legacy.list"
fi
apt_opts=(-o "APT::Sandbox::User=root" -o "Dir::Etc::SourceParts=${work}/apt/sources" -o "Dir::Etc::SourceList=/dev/null"
          -o "Dir::State::Lists=${work}/apt/lists")
apt-get "${apt_opts[@]}" update -qq
(cd "${work}" && apt-get "${apt_opts[@]}" source --download-only -qq mpich)
dsc="$(ls "${work}"/mpich_*.dsc | head -n1)"
case "$(basename "${dsc}")" in
  "mpich_${mpich_version}"-*) ;;
  *) log "error: Debian's source package is $(basename "${dsc}"), expected mpich ${mpich_version}"; exit 1 ;;
esac
dpkg-source --no-check -x "${dsc}" "${work}/src" >/dev/null

cd "${work}/src"
./configure --prefix="${mpich_prefix}" \
  --with-device=ch3:nemesis --with-pm=hydra --with-hwloc=/usr \
  --disable-fortran --disable-romio --without-yaksa \
  --enable-shared --disable-static --enable-g=none --enable-fast=O2 \
  > "${work}/configure.log" 2>&1 || { tail -n 40 "${work}/configure.log"; exit 1; }
make -j"$(nproc)" > "${work}/make.log" 2>&1 || { tail -n 60 "${work}/make.log"; exit 1; }
make install > "${work}/install.log" 2>&1 || { tail -n 40 "${work}/install.log"; exit 1; }
touch "${mpich_prefix}/.bellows-complete"
log "MPICH ready: ${mpich_prefix}/bin/mpiexec"
