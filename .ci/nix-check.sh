#!/usr/bin/env bash
# Nix checks that run without nixpkgs:
#   1. every tracked .nix file parses (nix-instantiate --parse);
#   2. vendorHash in nix/package.nix equals the NAR sha256 of `go mod vendor`
#      run over the tracked files (what buildGoModule computes);
#   3. only when NIXPKGS_LIB is set (a nixpkgs `lib` checkout, e.g.
#      nix-community/nixpkgs.lib): the module evaluation harness nix/eval.
#
# Usage: .ci/nix-check.sh [--update]
#   --update   rewrite vendorHash in nix/package.nix instead of failing.
# Env:     NIXPKGS_LIB=/path/to/nixpkgs.lib   run check 3 as well.
#
# Installs Debian's nix-bin with apt-get when nix-instantiate is missing.
# Never leaves vendor/ in the repository (it vendors into a temp dir).
set -euo pipefail

update=0
for arg in "$@"; do
	case "$arg" in
	--update) update=1 ;;
	-h | --help)
		sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "nix-check: unknown argument $arg (try --help)" >&2
		exit 2
		;;
	esac
done

root=$(git rev-parse --show-toplevel)
cd "$root"
pkgfile=nix/package.nix
fail=0
step() { printf '==> %s\n' "$*"; }

# --- 0. tools -------------------------------------------------------------------
if ! command -v nix-instantiate >/dev/null 2>&1; then
	step "installing nix-bin (nix-instantiate is missing)"
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null 2>&1 || {
			echo "nix-check: need root or sudo to apt-get install nix-bin" >&2
			exit 1
		}
		sudo="sudo"
	fi
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nix-bin >/dev/null
fi

nix_hash_path() {
	# nix >= 2.4 (nix-command); `--type` is what 2.8 knows, later versions
	# still accept it. Fall back to nix-hash.
	nix --extra-experimental-features nix-command hash path --type sha256 --sri "$1" 2>/dev/null ||
		nix-hash --type sha256 --sri "$1"
}

# --- 1. parse ---------------------------------------------------------------------
step "parsing tracked .nix files"
mapfile -d '' nixfiles < <(git ls-files -z -- '*.nix')
if [ "${#nixfiles[@]}" -gt 0 ]; then
	for f in "${nixfiles[@]}"; do
		[ -e "$f" ] || continue # deleted in the worktree, not yet in the index
		if ! out=$(nix-instantiate --parse "$f" 2>&1 >/dev/null); then
			echo "nix-check: $f does not parse:" >&2
			echo "$out" >&2
			fail=1
		fi
	done
	echo "    ${#nixfiles[@]} files"
fi

# --- 2. vendorHash ------------------------------------------------------------------
step "recomputing vendorHash (go mod vendor over the tracked files)"
command -v go >/dev/null 2>&1 || {
	echo "nix-check: go is not installed; cannot recompute vendorHash" >&2
	exit 1
}
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
mkdir "$tmp/src"
# Tracked files as they are in the worktree: what a flake build sees.
git ls-files -z --cached -- ':!:vendor/**' |
	tar --null --files-from=- --ignore-failed-read -cf - 2>/dev/null |
	tar -xf - -C "$tmp/src"
(
	cd "$tmp/src"
	env -u GOFLAGS GOWORK=off GOTOOLCHAIN=local go mod vendor -o "$tmp/vendor"
) || {
	echo "nix-check: go mod vendor failed (see above); fix go.mod/go.sum first" >&2
	exit 1
}
if [ -d "$tmp/vendor" ] && [ -n "$(ls -A "$tmp/vendor")" ]; then
	want=$(nix_hash_path "$tmp/vendor")
	want_nix="\"$want\""
else
	want=null # no dependencies: buildGoModule wants vendorHash = null
	want_nix=null
fi
have=$(sed -n 's/^[[:space:]]*vendorHash = \(.*\);[[:space:]]*$/\1/p' "$pkgfile" | head -n1)
if [ -z "$have" ]; then
	echo "nix-check: no 'vendorHash = ...;' line in $pkgfile" >&2
	exit 1
fi
if [ "$have" = "$want_nix" ]; then
	echo "    vendorHash ok: $want"
elif [ "$update" = 1 ]; then
	sed -i "s|^\([[:space:]]*vendorHash = \).*;[[:space:]]*$|\1$want_nix;|" "$pkgfile"
	echo "    vendorHash updated in $pkgfile: $have -> $want_nix"
else
	cat >&2 <<EOF
nix-check: vendorHash in $pkgfile is stale (go.mod/go.sum or the imported packages changed).
    in $pkgfile: $have
    expected:          $want_nix
  Fix: .ci/nix-check.sh --update   (or set vendorHash = $want_nix; by hand)
EOF
	fail=1
fi

# --- 3. module evaluation (optional) ----------------------------------------------------
if [ -n "${NIXPKGS_LIB:-}" ]; then
	step "evaluating nix/module.nix with the harness (NIXPKGS_LIB=$NIXPKGS_LIB)"
	if ! res=$(nix-instantiate --eval --strict --json nix/eval --arg libPath "$NIXPKGS_LIB" -A failures 2>&1); then
		echo "nix-check: the module does not evaluate:" >&2
		echo "$res" >&2
		fail=1
	elif [ "$res" != "[]" ]; then
		echo "nix-check: module evaluation checks failed:" >&2
		printf '%s\n' "$res" | sed 's/","/"\n"/g' >&2
		fail=1
	else
		echo "    module evaluates; all assertion cases fire"
	fi
else
	step "skipping module evaluation (set NIXPKGS_LIB to a nixpkgs lib checkout to run it)"
fi

if [ "$fail" -ne 0 ]; then
	echo "nix-check: FAILED" >&2
	exit 1
fi
echo "nix-check: ok"
