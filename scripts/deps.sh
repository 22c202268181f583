#!/usr/bin/env bash
# Installs what a clean Debian 12 machine lacks for vpn-agent's tests and
# demo. Idempotent; quiet when everything is there.
set -euo pipefail
need=()
have() { command -v "$1" >/dev/null 2>&1; }
have nft      || need+=(nftables)
have ip       || need+=(iproute2)
have iperf3   || need+=(iperf3)
have tcpdump  || need+=(tcpdump)
have wg       || need+=(wireguard-tools)
have ping     || need+=(iputils-ping)
have getent   || need+=(libc-bin)
have nsenter  || need+=(util-linux)
# natpmpc (libnatpmp) checks the provider's NAT-PMP gateway against a real client.
have natpmpc  || need+=(natpmpc)
# The port-forwarding pushers' tests run the real applications.
have transmission-daemon || need+=(transmission-daemon)
have qbittorrent-nox     || need+=(qbittorrent-nox)
# promtool checks the metrics exposition; prometheus scrapes the agent in e2e.
{ have promtool && have prometheus; } || need+=(prometheus)
have nix-instantiate || need+=(nix-bin)
# tests/e2e/podman_test.go and the leak matrix's container states: Debian's
# podman with runc (crun refuses the CI machines' cgroup setup), and a
# static busybox for their offline container roots.
have podman || need+=(podman)
have runc   || need+=(runc)
have catatonit || [ -x /usr/libexec/podman/catatonit ] || need+=(catatonit)
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
# tests/dist: kubectl reads the shipped Kubernetes example offline (label --local).
have kubectl || need+=(kubernetes-client)
if [ "${VPNC_WITH_VM:-1}" = 1 ]; then
  have qemu-system-x86_64 || need+=(qemu-system-x86)
  have mmdebstrap || need+=(mmdebstrap)
  have cpio || need+=(cpio)
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if ! have go; then
  if [ -x /usr/local/go/bin/go ]; then export PATH=/usr/local/go/bin:$PATH; else echo "deps: Go 1.25+ is required" >&2; exit 1; fi
fi
