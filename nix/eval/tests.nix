# Evaluation harness for the VM tests in nix/tests, without nixpkgs.
#
# NixOS itself is not available here, so every node configuration is
# evaluated against a permissive stub (undeclared options are accepted
# freeform, lists concatenate, mkForce/mkDefault work) together with the
# real nix/module.nix. That catches Nix-level mistakes (undefined names,
# wrong option types for services.vpnConfinement, failing module
# assertions) and renders each testScript so it can be linted with pyflakes.
# It cannot tell whether the NixOS options used exist or behave as assumed:
# that needs `nix flake check` on a NixOS machine.
#
#   nix-instantiate --eval --strict --json nix/eval/tests.nix --arg libPath /tmp/nixlib -A failures
#   nix-instantiate --eval --strict --json nix/eval/tests.nix --arg libPath /tmp/nixlib -A scripts
{ libPath }:

let
  libDir =
    if builtins.pathExists (toString libPath + "/lib/modules.nix") then
      toString libPath + "/lib"
    else
      toString libPath;
  lib = import libDir;
  inherit (lib) types mkOption;

  fakeHash = "00000000000000000000000000000000";
  drv = name: {
    type = "derivation";
    inherit name;
    outPath = "/nix/store/${fakeHash}-${name}";
  };

  # Packages the tests use (names checked against nixpkgs by hand).
  packageNames = [
    "coreutils"
    "curl"
    "dnsmasq"
    "dnsutils"
    "getent"
    "iperf3"
    "iproute2"
    "iputils"
    "jq"
    "nftables"
    "python3"
    "tcpdump"
    "transmission_4"
    "vpn-agent"
    "vpn-bench"
    "wireguard-tools"
  ];
  pkgs = lib.genAttrs packageNames drv // {
    inherit lib;
    writeText = name: text: builtins.seq text (drv name);
    writeTextDir = path: text: builtins.seq text (drv (baseNameOf path));
    writeShellScript = name: text: builtins.seq text (drv name);
    testers.runNixOSTest = t: t;
    formats.json = _: {
      type = types.anything;
      generate = name: _: drv name;
    };
    runCommand =
      name: _: _:
      drv name;
    stdenv = {
      buildPlatform.canExecute = _: true;
      hostPlatform = { };
    };
  };

  # Freeform values: attrsets merge recursively, lists concatenate, other
  # values must agree.
  loose = lib.mkOptionType {
    name = "loose";
    merge =
      loc: defs:
      if lib.all (d: builtins.isList d.value) defs then
        lib.concatMap (d: d.value) defs
      else if lib.all (d: builtins.isAttrs d.value && !(d.value ? outPath)) defs then
        (types.attrsOf loose).merge loc defs
      else
        lib.mergeEqualOption loc defs;
  };
  unitOption = lib.mkOptionType {
    name = "systemd option";
    merge =
      loc: defs:
      let
        defs' = lib.filterOverrides defs;
      in
      if lib.any (d: builtins.isList d.value) defs' then
        lib.concatMap (d: lib.toList d.value) defs'
      else
        lib.mergeEqualOption loc defs';
  };
  listOpt = mkOption {
    type = types.listOf types.str;
    default = [ ];
  };
  section = mkOption {
    type = types.attrsOf unitOption;
    default = { };
  };
  nixosStub = {
    freeformType = types.attrsOf loose;
    options = {
      assertions = mkOption {
        type = types.listOf types.unspecified;
        default = [ ];
      };
      warnings = mkOption {
        type = types.listOf types.str;
        default = [ ];
      };
      systemd.services = mkOption {
        type = types.attrsOf (
          types.submodule {
            freeformType = types.attrsOf loose;
            options = {
              wantedBy = listOpt;
              wants = listOpt;
              requires = listOpt;
              bindsTo = listOpt;
              partOf = listOpt;
              upheldBy = listOpt;
              after = listOpt;
              before = listOpt;
              serviceConfig = section;
              unitConfig = section;
            };
          }
        );
        default = { };
      };
      systemd.sockets = mkOption {
        type = types.attrsOf (types.submodule { options.socketConfig = section; });
        default = { };
      };
      boot.kernelModules = listOpt;
      boot.kernel.sysctl = mkOption {
        type = types.attrsOf loose;
        default = { };
      };
      environment.systemPackages = mkOption {
        type = types.listOf types.anything;
        default = [ ];
      };
    };
  };

  evalNode =
    node:
    (lib.evalModules {
      modules = [
        { _module.args.pkgs = pkgs; }
        nixosStub
        node
      ];
    }).config;

  tests = import ../tests { inherit pkgs; } // {
    vpn-benchmark = import ../tests/benchmark.nix {
      inherit pkgs;
      profile = "quick";
    };
    vpn-benchmark-sustained = import ../tests/benchmark.nix {
      inherit pkgs;
      profile = "sustained";
    };
  };

  nodeConfigs = lib.mapAttrs (_: t: lib.mapAttrs (_: evalNode) t.nodes) tests;

  failures = lib.concatLists (
    lib.mapAttrsToList (
      test: nodes:
      lib.concatLists (
        lib.mapAttrsToList (
          node: cfg:
          let
            failed = map (a: a.message) (lib.filter (a: !a.assertion) cfg.assertions);
          in
          # Force the whole configuration: every definition must evaluate.
          builtins.deepSeq (builtins.toJSON cfg) (
            map (m: "${test}/${node}: assertion failed: ${m}") failed
            ++ map (w: "${test}/${node}: warning: ${w}") cfg.warnings
          )
        ) nodes
      )
    ) nodeConfigs
  );
in
{
  inherit failures;
  # name -> { nodes = [names]; script = testScript } for linting.
  scripts = lib.mapAttrs (_: t: {
    nodes = lib.attrNames t.nodes;
    script = t.testScript;
  }) tests;
  # The generated agent configs of every host node.
  agentConfigs = lib.mapAttrs (
    _: nodes:
    lib.mapAttrs (_: cfg: lib.mapAttrs (_: ns: ns.generatedConfig) cfg.services.vpnConfinement.namespaces) (
      lib.filterAttrs (_: cfg: cfg ? services && cfg.services ? vpnConfinement) nodes
    )
  ) nodeConfigs;
}
