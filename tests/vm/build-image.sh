#!/usr/bin/env bash
# Builds (or reuses) the Debian VM image for the VM tier: a Debian kernel with its
# wireguard.ko, and a debootstrap'd bookworm rootfs with systemd as PID 1, packed as a
# compressed initramfs. Everything comes from Debian packages through the host's apt
# mirror configuration.
#
# Output, in $VPNC_VM_CACHE/<key>/ (default /var/cache/vpn-confinement-vm/<key>/):
#   vmlinuz          the Debian kernel
#   base.cpio.zst    the rootfs (kernel modules included), zstd-compressed cpio newc
#   kernel-release   e.g. 6.1.0-57-amd64
#   manifest.txt     key inputs, dpkg -l of the rootfs, sizes, build time
#   .complete        written last; a directory without it is ignored
# <key> is a hash of this script, the mirror, the kernel package version and the candidate
# versions of the image's packages, so a changed script or archive gives a new image and CI
# on the same machine reuses an unchanged one.
#
# Usage: build-image.sh [--print-dir] [--rebuild] [--key]
#   --print-dir  print only the image directory on stdout (build logs go to stderr)
#   --rebuild    ignore an existing image with the same key
#   --key        print the key and exit (no build)
# Environment:
#   VPNC_VM_CACHE   cache root (default /var/cache/vpn-confinement-vm)
#   VPNC_VM_MIRROR  Debian mirror URL (default: taken from /etc/apt/sources.list{,.d})
#   VPNC_VM_SUITE   Debian suite (default bookworm)
#   VPNC_VM_KEEP    how many image directories to keep (default 2, newest first)
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SCRIPT_PATH="$SCRIPT_DIR/$(basename "${BASH_SOURCE[0]}")"
CACHE_ROOT=${VPNC_VM_CACHE:-/var/cache/vpn-confinement-vm}
SUITE=${VPNC_VM_SUITE:-bookworm}
KEEP=${VPNC_VM_KEEP:-2}

# Packages of the guest rootfs, on top of debootstrap's minbase.
#   systemd, systemd-sysv, udev, kmod, dbus: systemd as PID 1 with a bus, module autoload
#   iproute2, nftables, wireguard-tools: what the agent and the tests drive
#   nscd, systemd-resolved, libnss-resolve: host resolvers the confinement must not leak
#     through; installed but disabled (tests enable them: see overlay/opt/vpnc/bin)
#   tcpdump, iperf3, bind9-dnsutils, iputils-ping, netcat-openbsd, socat, conntrack,
#   procps: test tools
#   podman, runc, netavark, busybox-static: a podman container confined by the product's flags
#     (container_test.go): runc as the runtime (as on the host e2e tier), netavark for
#     golang-github-containers-common's virtual network-stack dependency, busybox-static for
#     the image the test builds offline FROM scratch (debootstrap adds no Recommends)
PACKAGES=(
	systemd systemd-sysv udev kmod dbus
	iproute2 nftables wireguard-tools
	nscd systemd-resolved libnss-resolve
	tcpdump iperf3 bind9-dnsutils iputils-ping netcat-openbsd socat conntrack procps
	transmission-daemon curl
	podman runc netavark busybox-static
)
# Host tools this script and run.sh need (package:command).
HOST_TOOLS=(qemu-system-x86:qemu-system-x86_64 debootstrap:debootstrap cpio:cpio zstd:zstd
	debian-archive-keyring:/usr/share/keyrings/debian-archive-keyring.gpg)

PRINT_DIR=0 REBUILD=0 ONLY_KEY=0
for a in "$@"; do
	case $a in
	--print-dir) PRINT_DIR=1 ;;
	--rebuild) REBUILD=1 ;;
	--key) ONLY_KEY=1 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$SCRIPT_PATH" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "build-image.sh: unknown argument $a" >&2; exit 2 ;;
	esac
done

log() { echo "[vm-image] $*" >&2; }
die() { echo "[vm-image] ERROR: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot, apt)"
[ "$(uname -m)" = x86_64 ] || die "only x86_64 hosts are supported"

export DEBIAN_FRONTEND=noninteractive

# apt lists: apt-cache needs them; a fresh machine may have none.
apt_lists_ok() {
	local out
	out=$(apt-cache policy linux-image-amd64 2>/dev/null) || return 1
	[[ $out == *"Candidate: "[0-9]* ]]
}
if ! apt_lists_ok; then
	log "apt lists missing or stale: apt-get update"
	apt-get update -qq >&2 || die "apt-get update failed"
	apt_lists_ok || die "linux-image-amd64 has no candidate in the host's apt sources"
fi

# --- host tools --------------------------------------------------------------------------
missing=()
for pc in "${HOST_TOOLS[@]}"; do
	pkg=${pc%%:*} cmd=${pc#*:}
	if [[ $cmd == /* ]]; then [ -e "$cmd" ] || missing+=("$pkg")
	else command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg"); fi
done
if [ ${#missing[@]} -gt 0 ]; then
	log "installing host tools: ${missing[*]}"
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
		die "apt-get install ${missing[*]} failed"
fi

# --- mirror: the URI that serves $SUITE main in the host's apt configuration -------------
find_mirror() {
	local f
	# deb822 .sources files
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -e "$f" ] || continue
		awk -v suite="$SUITE" '
			function flush() {
				if (uris != "" && (" " suites " ") ~ (" " suite " ") && (" " comps " ") ~ / main / && types ~ /(^| )deb( |$)/) {
					split(uris, u, " "); print u[1]; found = 1; exit
				}
				uris = ""; suites = ""; comps = ""; types = ""
			}
			/^[[:space:]]*$/ { flush(); next }
			/^[[:space:]]*#/ { next }
			/^URIs:/ { sub(/^URIs:[[:space:]]*/, ""); uris = $0 }
			/^Suites:/ { sub(/^Suites:[[:space:]]*/, ""); suites = $0 }
			/^Components:/ { sub(/^Components:[[:space:]]*/, ""); comps = $0 }
			/^Types:/ { sub(/^Types:[[:space:]]*/, ""); types = $0 }
			END { if (!found) flush() }
		' "$f"
	done
	# one-line format
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -e "$f" ] || continue
		awk -v suite="$SUITE" '
			$1 == "deb" {
				i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
				uri = $i; s = $(i + 1); main = 0
				for (j = i + 2; j <= NF; j++) if ($j == "main") main = 1
				if (s == suite && main) { print uri; exit }
			}' "$f"
	done
}
MIRROR=${VPNC_VM_MIRROR:-$(find_mirror | head -n1)}
[ -n "$MIRROR" ] || die "no apt source for '$SUITE main' in /etc/apt/sources.list{,.d}; set VPNC_VM_MIRROR"
MIRROR=${MIRROR%/}

# --- key ---------------------------------------------------------------------------------
KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ && !k { k = $2 } END { print k }')
[ -n "$KPKG" ] || die "cannot resolve linux-image-amd64 to a versioned kernel package"
KREL=${KPKG#linux-image-}
versions=$(apt-cache policy linux-image-amd64 "$KPKG" "${PACKAGES[@]}" 2>/dev/null |
	awk '/^[^ ]/ { p = $1 } /Candidate:/ { print p, $2 }')
key_input=$(
	printf 'script %s\n' "$(sha256sum "$SCRIPT_PATH" | cut -d' ' -f1)"
	printf 'mirror %s\nsuite %s\nkernel %s\n' "$MIRROR" "$SUITE" "$KPKG"
	printf '%s\n' "$versions"
)
KEY=$(printf '%s' "$key_input" | sha256sum | cut -c1-16)
IMG_DIR=$CACHE_ROOT/$KEY
if [ "$ONLY_KEY" = 1 ]; then echo "$KEY"; exit 0; fi

done_out() {
	touch "$IMG_DIR/.complete" 2>/dev/null || true # last use, for the pruning below
	if [ "$PRINT_DIR" = 1 ]; then echo "$IMG_DIR"; else log "image: $IMG_DIR"; fi
	exit 0
}

mkdir -p "$CACHE_ROOT"
if [ "$REBUILD" = 0 ] && [ -e "$IMG_DIR/.complete" ]; then
	log "reusing cached image $KEY ($KPKG, $SUITE)"
	done_out
fi

# One build at a time per cache root.
exec 9>"$CACHE_ROOT/.lock"
flock 9
if [ "$REBUILD" = 0 ] && [ -e "$IMG_DIR/.complete" ]; then
	log "image $KEY was built by a concurrent run"
	done_out
fi

T0=$(date +%s)
log "building image $KEY: kernel $KPKG, $SUITE from $MIRROR"
WORK=$(mktemp -d "$CACHE_ROOT/.build-$KEY.XXXXXX")
ROOT=$WORK/rootfs
cleanup() {
	local rc=$?
	# Anything started inside the chroot (a postinst starting a daemon) is ours: end it.
	if [ -d "$ROOT" ]; then
		local p r
		for p in /proc/[0-9]*; do
			r=$(readlink "$p/root" 2>/dev/null) || continue
			if [ "$r" = "$ROOT" ]; then
				log "killing leftover chroot process ${p#/proc/}"
				kill -9 "${p#/proc/}" 2>/dev/null || true
			fi
		done
		local m
		for m in $(awk -v r="$ROOT" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r); do
			umount -l "$m" 2>/dev/null || true
		done
	fi
	rm -rf "$WORK"
	[ $rc = 0 ] || log "build failed (rc=$rc)"
}
trap cleanup EXIT

DEBS=$CACHE_ROOT/debs
mkdir -p "$DEBS/kernel" "$DEBS/debootstrap"

# --- kernel ------------------------------------------------------------------------------
kver=$(apt-cache policy "$KPKG" | awk '/Candidate:/ { print $2 }')
kdeb=$(ls "$DEBS/kernel/${KPKG}_${kver//:/%3a}_"*.deb 2>/dev/null | head -n1 || true)
if [ -z "$kdeb" ]; then
	log "downloading $KPKG $kver"
	rm -f "$DEBS/kernel/"*.deb
	if ! (cd "$DEBS/kernel" && apt-get download -qq -o APT::Sandbox::User=root "$KPKG=$kver" >&2); then
		# Stale lists name a version the mirror no longer has: refresh once and retry (the
		# key then no longer matches this build; the next run computes the new one).
		log "apt-get download failed; apt-get update and retry"
		apt-get update -qq >&2 || true
		kver=$(apt-cache policy "$KPKG" | awk '/Candidate:/ { print $2 }')
		(cd "$DEBS/kernel" && apt-get download -qq -o APT::Sandbox::User=root "$KPKG=$kver" >&2) ||
			die "apt-get download $KPKG failed"
	fi
	kdeb=$(ls "$DEBS/kernel/${KPKG}_"*.deb | head -n1)
fi
mkdir -p "$WORK/kernel"
dpkg-deb -x "$kdeb" "$WORK/kernel"
[ -f "$WORK/kernel/boot/vmlinuz-$KREL" ] || die "$kdeb has no boot/vmlinuz-$KREL"
T1=$(date +%s)

# --- rootfs ------------------------------------------------------------------------------
include=$(IFS=,; echo "${PACKAGES[*]}")
log "debootstrap --variant=minbase $SUITE (first stage)"
debootstrap --foreign --variant=minbase --components=main --cache-dir="$DEBS/debootstrap" \
	--include="$include" "$SUITE" "$ROOT" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
	{ tail -n 30 "$WORK/debootstrap.log" >&2; die "debootstrap (first stage) failed"; }
# No maintainer script may start a daemon inside the chroot (nscd, dbus, resolved, ...).
printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
chmod 755 "$ROOT/usr/sbin/policy-rc.d"
log "debootstrap (second stage)"
chroot "$ROOT" /debootstrap/debootstrap --second-stage >>"$WORK/debootstrap.log" 2>&1 ||
	{ tail -n 30 "$WORK/debootstrap.log" >&2; die "debootstrap (second stage) failed"; }
T2=$(date +%s)

log "configuring rootfs"
chroot "$ROOT" dpkg-query -W -f '${Package} ${Version}\n' >"$WORK/dpkg.txt"
for p in "${PACKAGES[@]}"; do
	grep -q "^$p " "$WORK/dpkg.txt" || die "package $p is not installed in the rootfs"
done
rm -f "$ROOT/usr/sbin/policy-rc.d"

echo vpnc-vm >"$ROOT/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tvpnc-vm\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$ROOT/etc/hosts"
: >"$ROOT/etc/fstab"
# A fixed machine-id: not a first boot (no systemd-firstboot prompt), reproducible logs.
echo 5f0e0c6a1d4b4e8f9a7c3b2d1e0f9a8b >"$ROOT/etc/machine-id"
# No network in the VM; a fixed resolv.conf instead of the build host's, not resolved's stub.
rm -f "$ROOT/etc/resolv.conf"
printf '# vpn-confinement VM image: the VM has no network\nnameserver 192.0.2.53\n' >"$ROOT/etc/resolv.conf"
# nsswitch: plain Debian default; the libnss-resolve variant is kept for tests that enable
# systemd-resolved (overlay/opt/vpnc/bin/vpnc-enable-resolved).
cp "$ROOT/etc/nsswitch.conf" "$ROOT/etc/nsswitch.conf.resolved"
sed -i -E 's/^hosts:.*/hosts:          files dns/' "$ROOT/etc/nsswitch.conf"
grep -q resolve "$ROOT/etc/nsswitch.conf.resolved" ||
	sed -i -E 's/^hosts:.*/hosts:          files resolve [!UNAVAIL=return] dns/' "$ROOT/etc/nsswitch.conf.resolved"

# Services: resolved and nscd installed but disabled; nothing that waits on a console or
# the network; boot straight to multi-user.target.
chroot "$ROOT" systemctl disable systemd-resolved.service nscd.service >/dev/null 2>&1 || true
# transmission-daemon is the service docs/systemd.md confines (walkthrough_test.go): installed,
# not started at boot.
chroot "$ROOT" systemctl disable transmission-daemon.service >/dev/null 2>&1 || true
chroot "$ROOT" systemctl set-default multi-user.target >/dev/null 2>&1
for u in getty@.service serial-getty@.service console-getty.service autovt@.service \
	systemd-firstboot.service systemd-networkd-wait-online.service \
	apt-daily.timer apt-daily-upgrade.timer apt-daily.service apt-daily-upgrade.service \
	dpkg-db-backup.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer \
	systemd-timesyncd.service iperf3.service; do
	ln -sf /dev/null "$ROOT/etc/systemd/system/$u"
done
mkdir -p "$ROOT/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=volatile\nForwardToConsole=no\n' >"$ROOT/etc/systemd/journald.conf.d/vpnc-vm.conf"
mkdir -p "$ROOT/opt/vpnc/bin" "$ROOT/opt/vpnc/tests"

# Kernel modules: only the trees the tests need (the full set makes the initramfs too big).
MODSRC=$WORK/kernel/lib/modules/$KREL
MODDST=$ROOT/lib/modules/$KREL
mkdir -p "$MODDST/kernel"
cp -a "$MODSRC"/modules.builtin* "$MODSRC"/modules.order "$MODDST/" 2>/dev/null || true
for d in net lib crypto arch fs block mm virt \
	drivers/net/wireguard drivers/net/veth.ko drivers/net/tun.ko drivers/net/dummy.ko \
	drivers/net/macvlan.ko drivers/net/ipvlan drivers/net/vxlan drivers/net/geneve.ko \
	drivers/net/ifb.ko drivers/net/virtio_net.ko drivers/net/net_failover.ko \
	drivers/virtio drivers/char/hw_random drivers/char/virtio_console.ko drivers/block/virtio_blk.ko \
	drivers/block/loop.ko; do
	[ -e "$MODSRC/kernel/$d" ] || continue
	mkdir -p "$MODDST/kernel/$(dirname "$d")"
	cp -a "$MODSRC/kernel/$d" "$MODDST/kernel/$d"
done
# Drop what no test uses even inside the kept trees (kvm_amd/kvm_intel: udev would try to
# load them for the emulated CPU's virtualisation flags, and fail).
rm -rf "$MODDST/kernel/arch/x86/kvm" "$MODDST/kernel/fs/"{ocfs2,gfs2,xfs,btrfs,nfs,nfsd,ceph,smb,cifs,ntfs3,f2fs,bcachefs,jfs,reiserfs,ubifs,dlm,afs,orangefs,coda,nilfs2,udf,ocfs2,erofs} \
	"$MODDST/kernel/net/"{bluetooth,wireless,mac80211,mac802154,ieee802154,nfc,sunrpc,ceph,rds,tipc,sctp,9p/9pnet_rdma.ko,9p/9pnet_xen.ko,wimax,batman-adv,dsa,can,rxrpc,smc,lapb,x25,appletalk,ax25,netrom,rose,atm,caif,mptcp/mptcp_diag.ko}
chroot "$ROOT" depmod -a "$KREL" || die "depmod failed"
[ -n "$(chroot "$ROOT" modinfo -k "$KREL" -n wireguard 2>/dev/null)" ] || die "wireguard.ko missing from the rootfs"

# Trim: docs, manuals, locales, apt caches.
rm -rf "$ROOT"/usr/share/{doc,man,info,locale,lintian,linda}/* "$ROOT"/var/cache/apt/* \
	"$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/debconf/*-old "$ROOT"/var/log/*.log \
	"$ROOT/debootstrap"
T3=$(date +%s)

# --- pack --------------------------------------------------------------------------------
log "packing initramfs"
OUT=$WORK/out
mkdir -p "$OUT"
cp "$WORK/kernel/boot/vmlinuz-$KREL" "$OUT/vmlinuz"
echo "$KREL" >"$OUT/kernel-release"
(cd "$ROOT" && find . -mindepth 1 -print0 | LC_ALL=C sort -z |
	cpio --null -o -H newc --quiet) | zstd -q -T0 -9 >"$OUT/base.cpio.zst"
T4=$(date +%s)
rootfs_mb=$(du -sm "$ROOT" | cut -f1)
cpio_mb=$(du -m "$OUT/base.cpio.zst" | cut -f1)
[ "$cpio_mb" -lt 150 ] || die "initramfs is ${cpio_mb} MB compressed (limit 150): trim more"
{
	echo "key $KEY"
	echo "built $(date -u +%FT%TZ) on $(hostname) in $((T4 - T0)) s" \
		"(kernel $((T1 - T0)) s, debootstrap $((T2 - T1)) s, configure $((T3 - T2)) s, pack $((T4 - T3)) s)"
	echo "rootfs ${rootfs_mb} MB unpacked, base.cpio.zst ${cpio_mb} MB"
	echo "--- key input"
	echo "$key_input"
	echo "--- dpkg"
	cat "$WORK/dpkg.txt"
} >"$OUT/manifest.txt"
touch "$OUT/.complete"
rm -rf "$IMG_DIR"
mv "$OUT" "$IMG_DIR"
log "built $KEY in $((T4 - T0)) s: rootfs ${rootfs_mb} MB, initramfs ${cpio_mb} MB" \
	"(kernel $((T1 - T0)) s, debootstrap $((T2 - T1)) s, configure $((T3 - T2)) s, pack $((T4 - T3)) s)"

# Keep the newest $KEEP images (by last use, this one included); drop older ones.
n=1
# shellcheck disable=SC2011 # cache dirs are hex keys
for old in $(ls -1dt "$CACHE_ROOT"/*/.complete 2>/dev/null | xargs -r -n1 dirname || true); do
	[ "$old" != "$IMG_DIR" ] || continue
	n=$((n + 1))
	[ "$n" -gt "$KEEP" ] || continue
	log "removing old image $(basename "$old")"
	rm -rf "$old"
done
# Old kernel debs are not needed once an image exists for the new one (already handled above);
# debootstrap's deb cache is kept for rebuilds.
done_out
