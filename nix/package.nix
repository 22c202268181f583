# One of the Go module's two binaries, each a package of its own:
#   vpn-agent  (default)        the agent; what the NixOS module runs
#   vpn-bench  (program = ...)  the benchmark runner (BENCHMARKS.md); only
#                               the benchmark VM tests install it
# Both build from the same source with the same vendorHash; the agent's
# package holds vpn-agent alone.
#
# vendorHash is the NAR sha256 of `go mod vendor` run over the git-tracked
# files. It changes whenever go.mod/go.sum (or the set of imported packages)
# changes: `.ci/nix-check.sh` recomputes it and fails on a mismatch, and
# `.ci/nix-check.sh --update` rewrites the line below.
{
  lib,
  buildGoModule,
  version ? "0.1.0-dev",
  program ? "vpn-agent",
}:
assert lib.elem program [
  "vpn-agent"
  "vpn-bench"
];
buildGoModule {
  pname = program;
  inherit version;

  # What the Go build reads (nix/source.nix says why), and the monitoring
  # files the agent's package installs (postInstall).
  src = lib.fileset.toSource {
    root = ../.;
    fileset = lib.fileset.unions [
      (import ./source.nix { inherit lib; })
      ../dist/prometheus/alerts.yml
      ../dist/grafana/vpn-confinement.json
    ];
  };

  vendorHash = "sha256-ZHx5JbPDzmMhn60aLVWGlyIjFQzhu926ZbiGZtOeGTw=";

  subPackages = [ "agent/cmd/${program}" ];

  # vpn-bench's reference mode: stock wireguard-go of exactly the module
  # version the agent embeds (go.mod's `tool golang.zx2c4.com/wireguard`
  # puts its main package into the vendored module set), next to vpn-bench,
  # where the bench looks for it (agent/bench/binaries_linux.go).
  postBuild = lib.optionalString (program == "vpn-bench") ''
    go build -o "$GOPATH/bin/vpn-bench-wireguard-go" golang.zx2c4.com/wireguard
  '';

  # The Prometheus alert rules and the Grafana dashboard of the agent's
  # metrics, of this very version (services.vpnConfinement.prometheusRules
  # and grafanaDashboards point here; docs/nixos.md#dashboard-and-alerts).
  postInstall = lib.optionalString (program == "vpn-agent") ''
    install -Dm444 dist/prometheus/alerts.yml "$out/share/vpn-confinement/prometheus/alerts.yml"
    install -Dm444 dist/grafana/vpn-confinement.json "$out/share/vpn-confinement/grafana/vpn-confinement.json"
  '';

  # A static binary: the agent only talks netlink and reads files (the
  # bench runs iperf3, ip, nft, wg and tc from PATH).
  env.CGO_ENABLED = "0";

  ldflags = [
    "-s"
    "-w"
  ]
  ++ lib.optional (
    program == "vpn-agent"
  ) "-X github.com/vpn-confinement/vpn-confinement/agent/cli.Version=${version}";

  meta = {
    description =
      if program == "vpn-agent" then
        "Confines services in a network namespace whose only way out is a WireGuard tunnel, with an nftables kill switch"
      else
        "Measures what vpn-agent's tunnel and kill switch cost, in a private topology it builds and removes";
    homepage = "https://github.com/vpn-confinement/vpn-confinement";
    mainProgram = program;
    platforms = lib.platforms.linux;
  };
}
