# What the evaluation harnesses (default.nix, tests.nix) share: nixpkgs'
# lib from libPath, fake store paths, the pkgs attributes nix/module.nix
# uses, and the systemd unit option types.
{ libPath }:

let
  # Either the lib directory itself or a checkout root with lib/ in it.
  libDir =
    if builtins.pathExists (toString libPath + "/lib/modules.nix") then
      toString libPath + "/lib"
    else
      toString libPath;
  lib = import libDir;
  inherit (lib) mkOption types;

  fakeHash = "00000000000000000000000000000000";
  drv = name: {
    type = "derivation";
    inherit name;
    outPath = "/nix/store/${fakeHash}-${name}";
  };

  # Same merge rule as nixos/lib/systemd-unit-options.nix: lists
  # concatenate, scalars must agree.
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
  # A systemd unit's dependency options and [Unit] section, as NixOS has
  # them (services and sockets).
  commonUnitOptions = {
    wantedBy = listOpt;
    requiredBy = listOpt;
    wants = listOpt;
    requires = listOpt;
    bindsTo = listOpt;
    partOf = listOpt;
    upheldBy = listOpt;
    after = listOpt;
    before = listOpt;
    unitConfig = section;
  };
in
{
  inherit lib drv;

  # What nix/module.nix takes from pkgs. runCommand keeps its script, so a
  # harness can read what a build would run.
  modulePkgs = {
    formats.json = _: {
      type = types.anything;
      generate = name: _value: drv name;
    };
    runCommand =
      name: _env: script:
      drv name // { inherit script; };
    stdenv = {
      buildPlatform.canExecute = _: true;
      hostPlatform = { };
    };
  };

  inherit listOpt section;

  # A systemd service's dependency options and sections, as NixOS has them.
  unitOptions = commonUnitOptions // {
    serviceConfig = section;
  };

  # The options every NixOS stub declares besides systemd.services.
  commonOptions = {
    assertions = mkOption {
      type = types.listOf types.unspecified;
      default = [ ];
    };
    warnings = mkOption {
      type = types.listOf types.str;
      default = [ ];
    };
    # nixpkgs' nscd module (on by default there); the module adds a drop-in.
    services.nscd.enable = mkOption {
      type = types.bool;
      default = false;
    };
    systemd.timers = mkOption {
      type = types.attrsOf types.anything;
      default = { };
    };
    systemd.sockets = mkOption {
      type = types.attrsOf (
        types.submodule {
          options = commonUnitOptions // {
            socketConfig = section;
          };
        }
      );
      default = { };
    };
    # nixpkgs' virtualisation.oci-containers, what the module reads and sets.
    virtualisation.oci-containers.backend = mkOption {
      type = types.enum [
        "podman"
        "docker"
      ];
      default = "podman";
    };
    virtualisation.oci-containers.containers = mkOption {
      type = types.attrsOf (
        types.submodule {
          options = {
            image = mkOption { type = types.str; };
            imageFile = mkOption {
              type = types.nullOr types.package;
              default = null;
            };
            ports = listOpt;
            extraOptions = listOpt;
            autoStart = mkOption {
              type = types.bool;
              default = true;
            };
          };
        }
      );
      default = { };
    };
    boot.kernelModules = listOpt;
    boot.kernel.sysctl = mkOption {
      type = types.attrsOf types.anything;
      default = { };
    };
    environment.systemPackages = mkOption {
      type = types.listOf types.anything;
      default = [ ];
    };
  };

  failedAssertions = cfg: map (a: a.message) (lib.filter (a: !a.assertion) cfg.assertions);
}
