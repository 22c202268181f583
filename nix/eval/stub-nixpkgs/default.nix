# A stand-in for `import nixpkgs { system; overlays; }` used by
# nix/eval/flake-outputs.nix: just enough of pkgs for flake.nix to evaluate.
# Reads the lib location from $NIXPKGS_LIB (set by the caller).
{
  system,
  overlays ? [ ],
}:
let
  libPath = builtins.getEnv "NIXPKGS_LIB";
  libDir = if builtins.pathExists (libPath + "/lib/modules.nix") then libPath + "/lib" else libPath;
  lib = import libDir;
  drv = name: extra: {
    type = "derivation";
    inherit name system;
    outPath = "/nix/store/00000000000000000000000000000000-${name}";
  } // extra;
  base = final: {
    inherit lib;
    callPackage = f: args: (if builtins.isFunction f then f else import f) (builtins.intersectAttrs (builtins.functionArgs (if builtins.isFunction f then f else import f)) final // args);
    # Returns its arguments (and the source it was given) for inspection.
    buildGoModule = args: drv "${args.pname}-${args.version}" { goModuleArgs = args; inherit (args) version; meta = args.meta or { }; };
    mkShell = args: drv "shell" { shellArgs = args; };
    testers.runNixOSTest = t: drv "vm-test-${t.name}" { testArgs = t; };
    dockerTools.buildLayeredImage = args: drv "${baseNameOf args.name}.tar.gz" { imageArgs = args; };
  } // lib.genAttrs [ "go" "gopls" "nftables" "iproute2" "wireguard-tools" "iperf3" "tcpdump" "coreutils" "curl" "dnsmasq" "dnsutils" "getent" "iputils" "jq" "python3" "transmission_4" ] (n: drv n { })
  // {
    writeText = name: text: builtins.seq text (drv name { });
    writeTextDir = path: text: builtins.seq text (drv (baseNameOf path) { });
    writeShellScript = name: text: builtins.seq text (drv name { });
  };
in
lib.fix (lib.foldl' (acc: overlay: lib.extends overlay acc) base overlays)
