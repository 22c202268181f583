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
  stubs = import ./stubs.nix { inherit libPath; };
  inherit (stubs) lib drv;
  inherit (lib) types mkOption;

  # Packages the tests use (names checked against nixpkgs by hand).
  packageNames = [
    "busybox"
    "coreutils"
    "curl"
    "dnsmasq"
    "dnsutils"
    "getent"
    "iperf3"
    "iproute2"
    "iputils"
    "jq"
    "netcat"
    "nftables"
    "python3"
    "tcpdump"
    "transmission_4"
    "vpn-agent"
    "vpn-bench"
    "wireguard-tools"
  ];
  pkgs =
    lib.genAttrs packageNames drv
    // stubs.modulePkgs
    // {
      inherit lib;
      writeText = name: text: builtins.seq text (drv name);
      writeTextDir = path: text: builtins.seq text (drv (baseNameOf path));
      writeShellScript = name: text: builtins.seq text (drv name);
      buildEnv = a: builtins.seq a.paths (drv a.name);
      dockerTools.buildImage = a: builtins.seq a.copyToRoot (drv a.name);
      testers.runNixOSTest = t: t;
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
  nixosStub = {
    freeformType = types.attrsOf loose;
    imports = [ { options = stubs.commonOptions; } ];
    options = {
      systemd.services = mkOption {
        type = types.attrsOf (
          types.submodule {
            freeformType = types.attrsOf loose;
            options = stubs.unitOptions;
          }
        );
        default = { };
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

  agentConfigs = lib.mapAttrs (
    _: nodes:
    lib.mapAttrs (_: cfg: lib.mapAttrs (_: ns: ns.generatedConfig) cfg.services.vpnConfinement.namespaces) (
      lib.filterAttrs (_: cfg: cfg ? services && cfg.services ? vpnConfinement) nodes
    )
  ) nodeConfigs;

  failures = lib.concatLists (
    lib.mapAttrsToList (
      test: nodes:
      lib.concatLists (
        lib.mapAttrsToList (
          node: cfg:
          let
            failed = stubs.failedAssertions cfg;
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
  inherit agentConfigs;
  # "test/node" -> what the module's build-time check validates, in the
  # shape of nix/eval's buildCases: every node's configs must pass together.
  buildCases = lib.listToAttrs (
    lib.concatLists (
      lib.mapAttrsToList (
        test: nodes:
        lib.mapAttrsToList (node: configs: {
          name = "${test}/${node}";
          value = {
            files = lib.mapAttrs' (n: lib.nameValuePair "${n}.json") configs;
            validate = map (n: "--config ${n}.json") (lib.attrNames configs);
            expect = null;
          };
        }) (lib.filterAttrs (_: c: c != { }) nodes)
      ) agentConfigs
    )
  );
}
