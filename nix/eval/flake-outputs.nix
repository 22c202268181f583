# Evaluates flake.nix's outputs against a stub nixpkgs (nix/eval/stub-nixpkgs)
# to check their shape: attribute names per system, that the package
# expression (including its lib.fileset source) evaluates, and that the
# VM tests and benchmarks are wired in. Needs NIXPKGS_LIB in the environment.
#
#   NIXPKGS_LIB=/tmp/nixlib nix-instantiate --eval --strict --json nix/eval/flake-outputs.nix
let
  libPath = builtins.getEnv "NIXPKGS_LIB";
  libDir = if builtins.pathExists (libPath + "/lib/modules.nix") then libPath + "/lib" else libPath;
  lib = import libDir;
  flake = import ../../flake.nix;
  nixpkgs = {
    inherit lib;
    outPath = ./stub-nixpkgs;
  };
  self = flake.outputs { inherit self nixpkgs; } // { outPath = ../..; };
  pkg = self.packages.x86_64-linux.vpn-agent.goModuleArgs;
  benchPkg = self.packages.x86_64-linux.vpn-bench.goModuleArgs;
in
{
  inputs = lib.attrNames flake.inputs;
  packages = lib.mapAttrs (_: lib.attrNames) self.packages;
  checks = lib.mapAttrs (_: lib.attrNames) self.checks;
  devShells = lib.mapAttrs (_: lib.attrNames) self.devShells;
  devShellPackages = map (p: p.name) self.devShells.x86_64-linux.default.shellArgs.packages;
  nixosModules = lib.attrNames self.nixosModules;
  overlays = lib.attrNames self.overlays;
  package = {
    inherit (pkg) pname version vendorHash subPackages ldflags;
    # The files buildGoModule would see (relative to the repo root).
    # lib.fileset needs builtins.readFileType (Nix >= 2.14).
    sourceFiles = if !(builtins ? readFileType) then "skipped: lib.fileset needs Nix >= 2.14" else lib.sort (a: b: a < b) (
      map (f: lib.removePrefix (toString ../.. + "/") (toString f)) (
        lib.fileset.toList (import ../source.nix { inherit lib; })
      )
    );
    srcIsStorePath =
      if !(builtins ? readFileType) then
        "skipped: lib.fileset needs Nix >= 2.14"
      else
        lib.hasPrefix builtins.storeDir (toString pkg.src);
  };
  # The sidecar image: its name and tag (the manifests' image), entrypoint and command.
  image = {
    inherit (self.packages.x86_64-linux.image.imageArgs) name tag;
    inherit (self.packages.x86_64-linux.image.imageArgs.config) Entrypoint Cmd;
  };
  # The bench's package: its own binary, the agent's vendorHash.
  benchPackage = {
    inherit (benchPkg) pname subPackages vendorHash;
    sameVendorHash = benchPkg.vendorHash == pkg.vendorHash;
  };
  vmTests = lib.mapAttrs (_: t: t.testArgs.name) (removeAttrs self.checks.x86_64-linux [ "package" "package-bench" ]) // {
    benchmark = self.packages.x86_64-linux.vpn-benchmark.testArgs.name;
    benchmark-sustained = self.packages.x86_64-linux.vpn-benchmark-sustained.testArgs.name;
  };
}
