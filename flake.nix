{
  description = "vpn-confinement: run services in a network namespace whose only way out is a WireGuard tunnel";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-25.11";

  outputs =
    { self, nixpkgs }:
    let
      inherit (nixpkgs) lib;
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      forAllSystems =
        f:
        lib.genAttrs systems (
          system:
          f (
            import nixpkgs {
              inherit system;
              overlays = [ self.overlays.default ];
            }
          )
        );
    in
    {
      overlays.default = final: _prev: {
        vpn-agent = final.callPackage ./nix/package.nix { };
        # The benchmark runner, a package of its own (BENCHMARKS.md).
        vpn-bench = final.callPackage ./nix/package.nix { program = "vpn-bench"; };
      };

      # The module plus the overlay that provides its default package.
      # (With a read-only `nixpkgs.pkgs`, import ./nix/module.nix directly and
      # set services.vpnConfinement.package instead.)
      nixosModules.default = {
        imports = [ ./nix/module.nix ];
        nixpkgs.overlays = [ self.overlays.default ];
      };
      nixosModules.vpn-confinement = self.nixosModules.default;

      packages = forAllSystems (pkgs: {
        default = pkgs.vpn-agent;
        inherit (pkgs) vpn-agent vpn-bench;
        # The sidecar image (docs/sidecar.md): `podman load < result`.
        image = pkgs.callPackage ./nix/image.nix { };
        # Opt-in benchmarks (NixOS VM tests); results in $out/benchmark.json.
        vpn-benchmark = import ./nix/tests/benchmark.nix {
          inherit pkgs;
          profile = "quick";
        };
        vpn-benchmark-sustained = import ./nix/tests/benchmark.nix {
          inherit pkgs;
          profile = "sustained";
        };
      });

      # `nix flake check` builds both packages and runs every VM test.
      checks = forAllSystems (
        pkgs:
        import ./nix/tests { inherit pkgs; }
        // {
          package = pkgs.vpn-agent;
          package-bench = pkgs.vpn-bench;
        }
      );

      devShells = forAllSystems (pkgs: {
        default = pkgs.mkShell {
          packages = with pkgs; [
            go
            gopls
            nftables
            iproute2
            wireguard-tools
            iperf3
            tcpdump
          ];
        };
      });
    };
}
