#!/usr/bin/env bash
# Nix checks that run without nixpkgs:
#   1. every tracked .nix file parses (nix-instantiate --parse);
#   2. vendorHash in nix/package.nix equals the NAR sha256 of `go mod vendor`
#      run over the tracked files (what buildGoModule computes);
#   3. only when NIXPKGS_LIB is set (a nixpkgs `lib` checkout, e.g.
#      nix-community/nixpkgs.lib): the module evaluation harness nix/eval,
#      the module's build-time `vpn-agent validate` run on its cases, and
#      that docs/nixos.md shows the units as evaluated.
#
# Usage: .ci/nix-check.sh [--update]
#   --update   rewrite vendorHash in nix/package.nix (and, with NIXPKGS_LIB,
#              the units shown in docs/nixos.md) instead of
#              failing.
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
		sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
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

# --- 3. evaluation harnesses (optional) ----------------------------------------------
# nix/eval/default.nix       module: example units/JSON + every assertion case
# nix/eval/tests.nix         VM test nodes against a permissive NixOS stub
# nix/eval/flake-outputs.nix flake outputs against a stub nixpkgs
# harness prints the evaluation's JSON; on an error it says so and fails
# (call it as x=$(harness ...) || fail=1: it runs in a subshell).
harness() { # name, file, attribute
	local res
	# stderr apart: nix warns there about its own configuration.
	if ! res=$(NIXPKGS_LIB="$NIXPKGS_LIB" nix-instantiate --eval --strict --json "$2" --arg libPath "$NIXPKGS_LIB" ${3:+-A "$3"} 2>"$tmp/harness.err"); then
		echo "nix-check: $1 does not evaluate:" >&2
		cat "$tmp/harness.err" >&2
		return 1
	fi
	printf '%s' "$res"
}
expect_none() { # name, file, attribute, what failed, what passed
	local res
	res=$(harness "$1" "$2" "$3") || {
		fail=1
		return 0
	}
	if [ "$res" != "[]" ]; then
		echo "nix-check: $4:" >&2
		printf '%s\n' "$res" | sed 's/","/"\n"/g' >&2
		fail=1
	else
		echo "    $5"
	fi
}
if [ -n "${NIXPKGS_LIB:-}" ]; then
	step "evaluating the module harness (NIXPKGS_LIB=$NIXPKGS_LIB)"
	expect_none nix/eval nix/eval failures "module checks failed" \
		"module evaluates; the example is as expected; all assertion cases fire"

	step "running the module's build-time check (vpn-agent validate --static over all namespaces) on each case"
	# nix/eval's cases, and every VM test node's namespaces (which must pass).
	if cases=$(harness nix/eval nix/eval buildCases) && nodes=$(harness nix/eval/tests.nix nix/eval/tests.nix buildCases); then
		printf '%s' "$cases" >"$tmp/buildcases.json"
		printf '%s' "$nodes" >"$tmp/buildnodes.json"
		(cd "$root" && env -u GOFLAGS go build -o "$tmp/vpn-agent" ./agent/cmd/vpn-agent) &&
			python3 - "$tmp/buildcases.json" "$tmp/buildnodes.json" "$tmp" <<'PY' || fail=1
import json, os, subprocess, sys
cases, tmp = json.load(open(sys.argv[1])), sys.argv[3]
nodes = json.load(open(sys.argv[2]))
cases.update(("node " + k, v) for k, v in nodes.items())
bad = 0
for name, c in sorted(cases.items()):
    d = os.path.join(tmp, "case-" + name.replace("/", "-").replace(" ", "-"))
    os.makedirs(d)
    for f, v in c["files"].items():
        json.dump(v, open(os.path.join(d, f), "w"))
    argv = [os.path.join(tmp, "vpn-agent"), "validate", "--static"] + " ".join(c["validate"]).split()
    r = subprocess.run(argv, cwd=d, capture_output=True, text=True)
    ok = r.returncode == 0 if c["expect"] is None else r.returncode == 2 and c["expect"] in r.stderr
    if not ok:
        bad = 1
        sys.stderr.write("nix-check: build case %s: want %s, got exit %d: %s" % (
            name, "success" if c["expect"] is None else "exit 2 and '%s'" % c["expect"], r.returncode, r.stderr))
if not bad:
    print("    the agent rejects each of %d cases as nix/eval expects; the example and %d VM test nodes pass" % (
        sum(c["expect"] is not None for c in cases.values()), len(nodes)))
sys.exit(bad)
PY
	else
		fail=1
	fi

	step "comparing the units shown in docs/nixos.md with the evaluated ones"
	if example=$(harness nix/eval nix/eval example); then
		printf '%s' "$example" >"$tmp/example.json"
		python3 - "$tmp/example.json" "$update" docs/nixos.md <<'PY' || fail=1
import json, sys
units, update = json.load(open(sys.argv[1]))["unitFiles"], sys.argv[2] == "1"
bad = 0
for doc in sys.argv[3:]:
    text = orig = open(doc).read()
    for name, want in units.items():
        head = "```ini\n# %s.service" % name
        start = text.find(head)
        if start < 0:
            continue
        start += len("```ini\n")
        end = text.index("```", start)
        if text[start:end] != want:
            text = text[:start] + want + text[end:]
    if text != orig:
        if update:
            open(doc, "w").write(text)
            print("    %s: units rewritten from the evaluation" % doc)
        else:
            bad = 1
            sys.stderr.write("nix-check: the units shown in %s differ from what nix/eval renders; "
                             "run .ci/nix-check.sh --update (with NIXPKGS_LIB)\n" % doc)
if not bad and not update:
    print("    they match")
sys.exit(bad)
PY
	else
		fail=1
	fi

	step "evaluating the VM test nodes against a NixOS stub"
	expect_none nix/eval/tests.nix nix/eval/tests.nix failures "VM test nodes trip module assertions/warnings" \
		"every node evaluates; no assertion or warning"
	py=""
	for cand in python3 /usr/bin/python3; do
		if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import pyflakes' 2>/dev/null; then
			py=$cand
			break
		fi
	done
	if [ -n "$py" ]; then
		step "linting the test scripts with pyflakes (as the NixOS test driver does)"
		if scripts=$(harness nix/eval/tests.nix nix/eval/tests.nix scripts); then
			printf '%s' "$scripts" >"$tmp/scripts.json"
			"$py" - "$tmp/scripts.json" "$tmp" <<'PY' || fail=1
import json, os, subprocess, sys
scripts, tmp = json.load(open(sys.argv[1])), sys.argv[2]
driver = ["start_all", "subtest", "retry", "machines", "log", "join_all", "polling_condition",
          "serial_stdout_on", "serial_stdout_off", "driver", "vlans", "Machine", "t"]
bad = 0
for name, t in sorted(scripts.items()):
    path = os.path.join(tmp, name + ".py")
    with open(path, "w") as f:
        f.write(t["script"])
    env = dict(os.environ, PYFLAKES_BUILTINS=",".join(t["nodes"] + driver))
    r = subprocess.run([sys.executable, "-m", "pyflakes", path], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        bad = 1
        sys.stderr.write("nix-check: testScript of %s:\n%s%s" % (name, r.stdout, r.stderr))
if not bad:
    print("    %d test scripts lint clean" % len(scripts))
sys.exit(bad)
PY
		else
			fail=1
		fi
	else
		step "skipping pyflakes (no python3 with pyflakes; apt-get install python3-pyflakes)"
	fi

	step "evaluating flake outputs against a stub nixpkgs"
	if res=$(harness nix/eval/flake-outputs.nix nix/eval/flake-outputs.nix); then
		echo "    $(printf '%s' "$res" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("packages:", ", ".join(d["packages"]["x86_64-linux"]), "| checks:", ", ".join(d["checks"]["x86_64-linux"]))' 2>/dev/null || echo ok)"
	else
		fail=1
	fi
else
	step "skipping evaluation harnesses (set NIXPKGS_LIB to a nixpkgs lib checkout to run them)"
fi

if [ "$fail" -ne 0 ]; then
	echo "nix-check: FAILED" >&2
	exit 1
fi
echo "nix-check: ok"
