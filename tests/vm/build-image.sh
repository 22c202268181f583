#!/usr/bin/env bash
# Builds (or reuses) the Debian VM image for the VM tier: a Debian kernel with its
# wireguard.ko, and an mmdebstrap'd rootfs (Debian 12 bookworm by default, or Debian 13
# trixie with VPNC_VM_SUITE=trixie) with systemd as PID 1, packed as a compressed initramfs.
# Everything comes from Debian packages through the host's apt mirror configuration.
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
#   VPNC_VM_SUITE   Debian suite: bookworm (default; the full tier) or trixie (the systemd
#                   checks on systemd 257: a slimmer package set)
#   VPNC_VM_KEEP    how many image directories to keep per suite (default 2, newest first)
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SCRIPT_PATH="$SCRIPT_DIR/$(basename "${BASH_SOURCE[0]}")"
CACHE_ROOT=${VPNC_VM_CACHE:-/var/cache/vpn-confinement-vm}
SUITE=${VPNC_VM_SUITE:-bookworm}
KEEP=${VPNC_VM_KEEP:-2}

# Packages of the guest rootfs, on top of minbase (Essential + apt).
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
# The trixie image runs only the systemd checks (ci.sh): what they need, and the small
# tools for looking into a failure (nc: socket_test.go's service script needs it; without it
# the socket checks' tunnel echo failed on trixie, looking like a confinement bug).
PACKAGES_TRIXIE=(
	systemd systemd-sysv udev kmod dbus
	iproute2 nftables wireguard-tools
	nscd systemd-resolved libnss-resolve
	iputils-ping netcat-openbsd bind9-host socat procps
)
# Host tools this script and run.sh need (package:command).
HOST_TOOLS=(qemu-system-x86:qemu-system-x86_64 mmdebstrap:mmdebstrap cpio:cpio zstd:zstd
	debian-archive-keyring:/etc/apt/trusted.gpg.d/debian-archive-trixie-stable.asc)

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
[ "$(id -u)" = 0 ] || die "must run as root (mmdebstrap, chroot, apt)"
[ "$(uname -m)" = x86_64 ] || die "only x86_64 hosts are supported"
# Suites whose keys Debian 12's debian-archive-keyring has (/etc/apt/trusted.gpg.d).
case $SUITE in
bookworm) ;;
trixie) PACKAGES=("${PACKAGES_TRIXIE[@]}") ;;
*) echo "[vm-image] VPNC_VM_SUITE=$SUITE: not supported; use bookworm or trixie" >&2; exit 2 ;;
esac

export DEBIAN_FRONTEND=noninteractive

# --- host tools --------------------------------------------------------------------------
missing=()
for pc in "${HOST_TOOLS[@]}"; do
	pkg=${pc%%:*} cmd=${pc#*:}
	if [[ $cmd == /* ]]; then [ -e "$cmd" ] || missing+=("$pkg")
	else command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg"); fi
done
if [ ${#missing[@]} -gt 0 ]; then
	log "installing host tools: ${missing[*]}"
	if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2; then
		log "apt-get install failed; apt-get update and retry"
		apt-get update -qq >&2 || die "apt-get update failed"
		apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
			die "apt-get install ${missing[*]} failed"
	fi
fi

# --- mirror: the URI that serves $1 main in the host's apt configuration -----------------
find_mirror() {
	local f suite=$1
	# deb822 .sources files
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -e "$f" ] || continue
		awk -v suite="$suite" '
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
		awk -v suite="$suite" '
			$1 == "deb" {
				i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
				uri = $i; s = $(i + 1); main = 0
				for (j = i + 2; j <= NF; j++) if ($j == "main") main = 1
				if (s == suite && main) { print uri; exit }
			}' "$f"
	done
}
# A suite the host does not list (trixie on a Debian 12 host) comes from the host's
# bookworm mirror: one archive serves every suite.
MIRROR=${VPNC_VM_MIRROR:-$(find_mirror "$SUITE" | head -n1)}
[ -n "$MIRROR" ] || MIRROR=$(find_mirror bookworm | head -n1)
[ -n "$MIRROR" ] || die "no apt source for '$SUITE main' (or bookworm main) in /etc/apt/sources.list{,.d}; set VPNC_VM_MIRROR"
MIRROR=${MIRROR%/}

# --- the suite's own apt lists -----------------------------------------------------------
# The key and the kernel download need $SUITE's package lists, which the host's apt (bookworm,
# its -updates and -security) does not have for trixie, and whose candidates would not be what
# mmdebstrap installs from "$SUITE main" for bookworm either: a private apt state per suite,
# refreshed when older than 6 hours (a stale copy is used when the mirror cannot be reached).
APTDIR=$CACHE_ROOT/apt/$SUITE
mkdir -p "$APTDIR/lists/partial" "$APTDIR/cache/archives/partial" "$APTDIR/empty"
echo "deb $MIRROR $SUITE main" >"$APTDIR/sources.list"
: >>"$APTDIR/status"
APT_OPTS=(-o "Dir::Etc::SourceList=$APTDIR/sources.list" -o "Dir::Etc::SourceParts=$APTDIR/empty"
	-o "Dir::State::Lists=$APTDIR/lists" -o "Dir::Cache=$APTDIR/cache" -o "Dir::State::status=$APTDIR/status"
	-o "Dir::Etc::Preferences=$APTDIR/empty/none" -o "Dir::Etc::PreferencesParts=$APTDIR/empty"
	-o APT::Sandbox::User=root
	-o Dir::Cache::pkgcache=pkgcache.bin -o Dir::Cache::srcpkgcache=srcpkgcache.bin)
# (The binary caches, which Debian's Docker images turn off: each apt-cache call here would
# parse the whole Packages file again, seconds under load.)
# Only the Packages index (not the host's appstream/command-not-found extras).
for t in DEP-11 DEP-11-icons-small DEP-11-icons DEP-11-icons-hidpi CNF; do
	APT_OPTS+=(-o "Acquire::IndexTargets::deb::$t::DefaultEnabled=false")
done
suite_lists_ok() {
	local out
	out=$(apt-cache "${APT_OPTS[@]}" policy linux-image-amd64 2>/dev/null) || return 1
	[[ $out == *"Candidate: "[0-9]* ]]
}
(
	flock 8
	if [ -z "$(find "$APTDIR/updated" -mmin -360 2>/dev/null)" ] || ! suite_lists_ok ||
		[ "$(cat "$APTDIR/updated" 2>/dev/null)" != "$MIRROR" ]; then
		log "apt-get update ($SUITE main from $MIRROR)"
		if apt-get "${APT_OPTS[@]}" update -qq >&2; then
			echo "$MIRROR" >"$APTDIR/updated"
		else
			log "apt-get update of $SUITE failed; using the lists there are"
		fi
	fi
) 8>"$APTDIR/.lock"
suite_lists_ok || die "linux-image-amd64 has no candidate in $SUITE main at $MIRROR"

# --- key ---------------------------------------------------------------------------------
KPKG=$(apt-cache "${APT_OPTS[@]}" depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ && !k { k = $2 } END { print k }')
[ -n "$KPKG" ] || die "cannot resolve linux-image-amd64 to a versioned kernel package"
KREL=${KPKG#linux-image-}
versions=$(apt-cache "${APT_OPTS[@]}" policy linux-image-amd64 "$KPKG" "${PACKAGES[@]}" 2>/dev/null |
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
trap 'exit 143' TERM
trap 'exit 130' INT

# Downloaded .debs, per suite: the kernel's, and every package of the rootfs (apt's archive
# cache; a rebuild downloads only what changed).
DEBS=$CACHE_ROOT/debs/$SUITE
mkdir -p "$DEBS/kernel" "$DEBS/archives"

# --- kernel ------------------------------------------------------------------------------
kver=$(apt-cache "${APT_OPTS[@]}" policy "$KPKG" | awk '/Candidate:/ { print $2 }')
kdeb=$(ls "$DEBS/kernel/${KPKG}_${kver//:/%3a}_"*.deb 2>/dev/null | head -n1 || true)
if [ -z "$kdeb" ]; then
	log "downloading $KPKG $kver"
	rm -f "$DEBS/kernel/"*.deb
	if ! (cd "$DEBS/kernel" && apt-get "${APT_OPTS[@]}" download -qq "$KPKG=$kver" >&2); then
		# Stale lists name a version the mirror no longer has: refresh once and retry (the
		# key then no longer matches this build; the next run computes the new one).
		log "apt-get download failed; apt-get update and retry"
		apt-get "${APT_OPTS[@]}" update -qq >&2 || true
		kver=$(apt-cache "${APT_OPTS[@]}" policy "$KPKG" | awk '/Candidate:/ { print $2 }')
		(cd "$DEBS/kernel" && apt-get "${APT_OPTS[@]}" download -qq "$KPKG=$kver" >&2) ||
			die "apt-get download $KPKG failed"
	fi
	kdeb=$(ls "$DEBS/kernel/${KPKG}_"*.deb | head -n1)
fi
mkdir -p "$WORK/kernel"
dpkg-deb -x "$kdeb" "$WORK/kernel"
[ -f "$WORK/kernel/boot/vmlinuz-$KREL" ] || die "$kdeb has no boot/vmlinuz-$KREL"
T1=$(date +%s)

# --- rootfs ------------------------------------------------------------------------------
# mmdebstrap, not debootstrap (which took ~620 s of a ~700 s build on the CI machine): apt
# resolves and downloads in parallel, dpkg unpacks with force-unsafe-io under eatmydata (the
# image is packed from a fresh tree; a crash just fails the build), and after the Essential
# set no docs, manuals or locales are unpacked (they were deleted afterwards anyway; a
# path-exclude on mmdebstrap's own --dpkgopt would filter the Essential set through
# mmtarfilter, one python3 start per package, slower than unpacking them). mmdebstrap
# replaces policy-rc.d and start-stop-daemon while it installs: no maintainer script starts a
# daemon in the chroot (nscd, dbus, resolved, ...). The cached .debs are hard-linked into the
# chroot's apt archive before the download and the archive's .debs back into the cache after
# the install (apt downloads only what is not there yet, and the cache then holds exactly this
# build's packages).
include=$(IFS=,; echo "${PACKAGES[*]}")
# bookworm: /usr merged the way debootstrap does it (else apt picks usrmerge, and perl with it).
hooks=()
[ "$SUITE" != bookworm ] || hooks+=(--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr)
qdebs=$(printf '%q' "$DEBS/archives")
log "mmdebstrap --variant=minbase $SUITE"
PATH=/usr/sbin:/usr/bin:/sbin:/bin mmdebstrap --variant=minbase --components=main --include="$include" \
	--dpkgopt=force-unsafe-io \
	--essential-hook="printf 'path-exclude=/usr/share/%s/*\\n' doc man info locale >\"\$1/etc/dpkg/dpkg.cfg.d/zz-vpnc-nodoc\"" \
	--hook-dir=/usr/share/mmdebstrap/hooks/eatmydata "${hooks[@]}" \
	--skip=essential/unlink --skip=cleanup/apt/cache \
	--setup-hook="mkdir -p \"\$1/var/cache/apt/archives/partial\" && find $qdebs -maxdepth 1 -name '*.deb' -exec cp -l -t \"\$1/var/cache/apt/archives/\" {} +" \
	--customize-hook="for f in \"\$1\"/var/cache/apt/archives/*.deb; do [ -e $qdebs/\"\${f##*/}\" ] || ln \"\$f\" $qdebs/; done" \
	"$SUITE" "$ROOT" "$MIRROR" >"$WORK/mmdebstrap.log" 2>&1 ||
	{ tail -n 30 "$WORK/mmdebstrap.log" >&2; die "mmdebstrap failed"; }
# Drop the cached .debs this build did not use (older versions).
for f in "$DEBS/archives/"*.deb; do
	[ -e "$f" ] || continue
	[ -e "$ROOT/var/cache/apt/archives/${f##*/}" ] || rm -f "$f"
done
T2=$(date +%s)

log "configuring rootfs"
chroot "$ROOT" dpkg-query -W -f '${Package} ${Version}\n' >"$WORK/dpkg.txt"
for p in "${PACKAGES[@]}"; do
	grep -q "^$p " "$WORK/dpkg.txt" || die "package $p is not installed in the rootfs"
done

rm -f "$ROOT/etc/dpkg/dpkg.cfg.d/zz-vpnc-nodoc"
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
[ -d "$MODSRC" ] || MODSRC=$WORK/kernel/usr/lib/modules/$KREL # trixie: /usr-merged package
[ -d "$MODSRC" ] || die "$kdeb has no lib/modules/$KREL"
MODDST=$ROOT/lib/modules/$KREL
mkdir -p "$MODDST/kernel"
cp -a "$MODSRC"/modules.builtin* "$MODSRC"/modules.order "$MODDST/" 2>/dev/null || true
for d in net lib crypto arch fs block mm virt \
	drivers/net/wireguard drivers/net/veth.ko drivers/net/tun.ko drivers/net/dummy.ko \
	drivers/net/macvlan.ko drivers/net/ipvlan drivers/net/vxlan drivers/net/geneve.ko \
	drivers/net/ifb.ko drivers/net/virtio_net.ko drivers/net/net_failover.ko \
	drivers/virtio drivers/char/hw_random drivers/char/virtio_console.ko drivers/block/virtio_blk.ko \
	drivers/block/loop.ko; do
	# trixie's modules are compressed (veth.ko.xz)
	for m in "$MODSRC/kernel/$d" "$MODSRC/kernel/$d".xz "$MODSRC/kernel/$d".zst; do
		[ -e "$m" ] || continue
		mkdir -p "$MODDST/kernel/$(dirname "$d")"
		cp -a "$m" "$MODDST/kernel/$(dirname "$d")/"
	done
done
# Drop what no test uses even inside the kept trees (kvm_amd/kvm_intel: udev would try to
# load them for the emulated CPU's virtualisation flags, and fail).
rm -rf "$MODDST/kernel/arch/x86/kvm" "$MODDST/kernel/fs/"{ocfs2,gfs2,xfs,btrfs,nfs,nfsd,ceph,smb,cifs,ntfs3,f2fs,bcachefs,jfs,reiserfs,ubifs,dlm,afs,orangefs,coda,nilfs2,udf,ocfs2,erofs} \
	"$MODDST/kernel/net/"{bluetooth,wireless,mac80211,mac802154,ieee802154,nfc,sunrpc,ceph,rds,tipc,sctp,9p/9pnet_rdma.ko*,9p/9pnet_xen.ko*,wimax,batman-adv,dsa,can,rxrpc,smc,lapb,x25,appletalk,ax25,netrom,rose,atm,caif,mptcp/mptcp_diag.ko*}
chroot "$ROOT" depmod -a "$KREL" || die "depmod failed"
[ -n "$(chroot "$ROOT" modinfo -k "$KREL" -n wireguard 2>/dev/null)" ] || die "wireguard.ko missing from the rootfs"

# Trim: docs, manuals, locales, apt caches.
rm -rf "$ROOT"/usr/share/{doc,man,info,locale,lintian,linda}/* "$ROOT"/var/cache/apt/* \
	"$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/debconf/*-old "$ROOT"/var/log/*.log
T3=$(date +%s)

# --- pack --------------------------------------------------------------------------------
log "packing initramfs"
OUT=$WORK/out
mkdir -p "$OUT"
cp "$WORK/kernel/boot/vmlinuz-$KREL" "$OUT/vmlinuz"
echo "$KREL" >"$OUT/kernel-release"
echo "$SUITE" >"$OUT/suite"
cp "$WORK/mmdebstrap.log" "$OUT/"
(cd "$ROOT" && find . -mindepth 1 -print0 | LC_ALL=C sort -z |
	cpio --null -o -H newc --quiet) | zstd -q -T0 -9 >"$OUT/base.cpio.zst"
T4=$(date +%s)
rootfs_mb=$(du -sm "$ROOT" | cut -f1)
cpio_mb=$(du -m "$OUT/base.cpio.zst" | cut -f1)
[ "$cpio_mb" -lt 150 ] || die "initramfs is ${cpio_mb} MB compressed (limit 150): trim more"
{
	echo "key $KEY"
	echo "built $(date -u +%FT%TZ) on $(hostname) in $((T4 - T0)) s" \
		"(kernel $((T1 - T0)) s, mmdebstrap $((T2 - T1)) s, configure $((T3 - T2)) s, pack $((T4 - T3)) s)"
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
	"(kernel $((T1 - T0)) s, mmdebstrap $((T2 - T1)) s, configure $((T3 - T2)) s, pack $((T4 - T3)) s)"

# Keep the newest $KEEP images of this suite (by last use, this one included); drop older
# ones. (An image without a suite file predates trixie: bookworm.)
n=1
# shellcheck disable=SC2011 # cache dirs are hex keys
for old in $(ls -1dt "$CACHE_ROOT"/*/.complete 2>/dev/null | xargs -r -n1 dirname || true); do
	[ "$old" != "$IMG_DIR" ] || continue
	[ "$(cat "$old/suite" 2>/dev/null || echo bookworm)" = "$SUITE" ] || continue
	n=$((n + 1))
	[ "$n" -gt "$KEEP" ] || continue
	log "removing old image $(basename "$old")"
	rm -rf "$old"
done
done_out
