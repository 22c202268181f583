# The vpn-agent binary.
#
# vendorHash is the NAR sha256 of `go mod vendor` run over the git-tracked
# files. It changes whenever go.mod/go.sum (or the set of imported packages)
# changes: `.ci/nix-check.sh` recomputes it and fails on a mismatch, and
# `.ci/nix-check.sh --update` rewrites the line below.
{
  lib,
  buildGoModule,
  version ? "0.1.0-dev",
}:

buildGoModule {
  pname = "vpn-agent";
  inherit version;

  # Only what the Go build reads. The vendor directory that buildGoModule
  # computes depends on the imports of every package in the module, so every
  # .go file of the repository (tests/ too) and any nested go.mod is
  # included, as in the tree that .ci/nix-check.sh hashes; agent/ and policy/
  # are included whole for any //go:embed files.
  src = lib.fileset.toSource {
    root = ../.;
    fileset = lib.fileset.unions [
      ../go.mod
      ../go.sum
      (lib.fileset.fileFilter (
        file:
        file.hasExt "go"
        || lib.elem file.name [
          "go.mod"
          "go.sum"
          "go.work"
        ]
      ) ../.)
      (lib.fileset.maybeMissing ../agent)
      (lib.fileset.maybeMissing ../policy)
    ];
  };

  vendorHash = "sha256-70Gr/x1nNWJoH+6aWNiMj6KoJis4nVVY40Zmh4JL9ek=";

  subPackages = [ "agent/cmd/vpn-agent" ];

  # A static binary: the agent only talks netlink and reads files.
  env.CGO_ENABLED = "0";

  ldflags = [
    "-s"
    "-w"
    "-X github.com/vpn-confinement/vpn-confinement/agent/cli.Version=${version}"
  ];

  meta = {
    description = "Confines services in a network namespace whose only way out is a WireGuard tunnel, with an nftables kill switch";
    homepage = "https://github.com/vpn-confinement/vpn-confinement";
    mainProgram = "vpn-agent";
    platforms = lib.platforms.linux;
  };
}
