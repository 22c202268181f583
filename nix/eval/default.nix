# Evaluation harness for nix/module.nix without nixpkgs.
#
# Evaluates the module with lib.evalModules against small stubs of the NixOS
# options it reads and sets (systemd.services/sockets, assertions, warnings,
# boot.*, environment.systemPackages) and a stub `pkgs`. It proves that the
# module evaluates, shows the units and agent JSON it generates, and checks
# that every assertion fires on a config made to trip it.
#
# It needs only nixpkgs' `lib` (e.g. a checkout of nix-community/nixpkgs.lib;
# never committed here):
#
#   nix-instantiate --eval --strict --json nix/eval --arg libPath /tmp/nixlib -A example
#   nix-instantiate --eval --strict --json nix/eval --arg libPath /tmp/nixlib -A failures   # [] = pass
#
# .ci/nix-check.sh runs it when NIXPKGS_LIB points at such a checkout.
{
  # A directory holding nixpkgs' lib: either the lib directory itself or a
  # checkout root with lib/ in it.
  libPath,
}:

let
  libDir =
    if builtins.pathExists (toString libPath + "/lib/modules.nix") then
      toString libPath + "/lib"
    else
      toString libPath;
  lib = import libDir;
  inherit (lib) mkOption types;

  fakeHash = "00000000000000000000000000000000";
  fakeStorePath = name: "/nix/store/${fakeHash}-${name}";

  # --- stub pkgs -------------------------------------------------------------
  pkgs = {
    vpn-agent = {
      type = "derivation";
      name = "vpn-agent-0.1.0";
      outPath = fakeStorePath "vpn-agent-0.1.0";
    };
    formats.json = _: {
      type = types.anything;
      generate = name: _value: fakeStorePath name;
    };
    runCommand =
      name: _env: _script:
      fakeStorePath name;
    stdenv = {
      buildPlatform.canExecute = _: true;
      hostPlatform = { };
    };
  };

  # --- stub NixOS options ------------------------------------------------------
  # Same merge rule as nixos/lib/systemd-unit-options.nix: lists concatenate,
  # scalars must agree.
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
  unitSection = mkOption {
    type = types.attrsOf unitOption;
    default = { };
  };
  serviceModule = {
    options = {
      description = mkOption {
        type = types.str;
        default = "";
      };
      wantedBy = listOpt;
      requiredBy = listOpt;
      wants = listOpt;
      requires = listOpt;
      bindsTo = listOpt;
      partOf = listOpt;
      upheldBy = listOpt;
      after = listOpt;
      before = listOpt;
      path = mkOption {
        type = types.listOf types.anything;
        default = [ ];
      };
      environment = mkOption {
        type = types.attrsOf types.anything;
        default = { };
      };
      script = mkOption {
        type = types.lines;
        default = "";
      };
      serviceConfig = unitSection;
      unitConfig = unitSection;
    };
  };
  stubModule = {
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
        type = types.attrsOf (types.submodule serviceModule);
        default = { };
      };
      systemd.sockets = mkOption {
        type = types.attrsOf (types.submodule { options.socketConfig = unitSection; });
        default = { };
      };
      boot.kernelModules = listOpt;
      boot.kernel.sysctl = mkOption {
        type = types.attrsOf types.anything;
        default = { };
      };
      system.etc.overlay.enable = mkOption {
        type = types.bool;
        default = false;
      };
      system.etc.overlay.mutable = mkOption {
        type = types.bool;
        default = true;
      };
      environment.systemPackages = mkOption {
        type = types.listOf types.anything;
        default = [ ];
      };
    };
  };

  eval =
    configModule:
    (lib.evalModules {
      modules = [
        { _module.args.pkgs = pkgs; }
        stubModule
        ../module.nix
        configModule
      ];
    }).config;

  failedAssertions = cfg: map (a: a.message) (lib.filter (a: !a.assertion) cfg.assertions);

  # What a unit looks like, without the stub's empty fields.
  showUnit =
    u:
    lib.filterAttrs (_: v: v != [ ] && v != { } && v != "") {
      inherit (u)
        description
        wantedBy
        wants
        bindsTo
        after
        before
        unitConfig
        serviceConfig
        ;
    };

  # --- the documented example (docs/nixos.md) --------------------------------
  exampleConfig = {
    services.vpnConfinement = {
      enable = true;
      namespaces.proton = {
        wireguard.configFile = "/run/secrets/proton.conf";
        dns.servers = [ "10.2.0.1" ];
        openPorts = [
          {
            port = 51413;
            protocol = "both";
          }
        ];
        hostLink = {
          enable = true;
          hostAddress = "10.200.1.1/30";
          namespaceAddress = "10.200.1.2/30";
          accessibleFrom = [ "192.168.1.0/24" ];
          portMappings = [
            {
              from = 9091;
              to = 9091;
            }
          ];
        };
      };
      namespaces.mullvad = {
        backend = "userspace";
        wireguard = {
          privateKeyFile = "/run/secrets/mullvad.key";
          addresses = [
            "10.64.1.2/32"
            "fc00:bbbb:bbbb:bb01::1:2/128"
          ];
          mtu = 1280;
          peers = [
            {
              publicKey = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=";
              endpoint = "198.51.100.1:51820";
              persistentKeepalive = 25;
            }
          ];
        };
        ipv6 = "tunnel";
        dns.servers = [ "10.64.0.1" ];
      };
    };
    systemd.services.transmission = {
      description = "Transmission BitTorrent Service";
      vpnConfinement = {
        enable = true;
        namespace = "proton";
      };
    };
    systemd.services.prowlarr.vpnConfinement = {
      enable = true;
      namespace = "mullvad";
    };
  };
  example = eval exampleConfig;

  # Unit text the way NixOS writes it (nixos/lib/systemd-lib.nix, simplified):
  # lists become repeated lines, booleans true/false, dependencies one line
  # each; NixOS adds Environment= (PATH, LOCALE_ARCHIVE, TZDIR) and turns
  # wantedBy into .wants symlinks instead of an [Install] section.
  renderValue =
    v:
    if v == true then
      "true"
    else if v == false then
      "false"
    else
      toString v;
  renderSection =
    attrs:
    lib.concatStrings (
      lib.mapAttrsToList (n: v: lib.concatMapStrings (x: "${n}=${renderValue x}\n") (lib.toList v)) attrs
    );
  depLine = key: list: lib.optionalString (list != [ ]) "${key}=${lib.concatStringsSep " " list}\n";
  unitText =
    name: u:
    "# ${name}.service"
    + lib.optionalString (u.wantedBy != [ ]) " (wanted by ${lib.concatStringsSep ", " u.wantedBy})"
    + lib.optionalString (u.upheldBy != [ ]) " (upheld by ${lib.concatStringsSep ", " u.upheldBy})"
    + "\n[Unit]\n"
    + lib.optionalString (u.description != "") "Description=${u.description}\n"
    + depLine "Wants" u.wants
    + depLine "BindsTo" u.bindsTo
    + depLine "PartOf" u.partOf
    + depLine "After" u.after
    + depLine "Before" u.before
    + renderSection u.unitConfig
    + "\n[Service]\n"
    + renderSection u.serviceConfig;

  exampleReport = {
    failedAssertions = failedAssertions example;
    inherit (example) warnings;
    boot = {
      inherit (example.boot) kernelModules;
      inherit (example.boot.kernel) sysctl;
    };
    agentConfigs = lib.mapAttrs (_: ns: ns.generatedConfig) example.services.vpnConfinement.namespaces;
    unitFiles = lib.mapAttrs unitText (
      lib.filterAttrs (
        n: _:
        lib.elem n [
          "vpn-agent-proton"
          "transmission"
        ]
      ) example.systemd.services
    );
    units = lib.mapAttrs (_: showUnit) (
      lib.filterAttrs (
        n: _:
        lib.elem n [
          "vpn-agent-proton"
          "vpn-agent-mullvad"
          "transmission"
          "prowlarr"
        ]
      ) example.systemd.services
    );
  };

  # --- negative cases: each must trip an assertion containing `expect` -------
  base = {
    services.vpnConfinement.enable = true;
    services.vpnConfinement.namespaces.vpn = {
      wireguard.privateKeyFile = "/run/secrets/vpn.key";
    };
  };
  withBase = extra: lib.recursiveUpdate base extra;

  cases = {
    name-too-long = {
      config = withBase { services.vpnConfinement.namespaces.averyveryverylongname.wireguard.privateKeyFile = "/run/k"; };
      expect = "is 21 characters long; use at most 12";
    };
    name-unsafe = {
      config = withBase { services.vpnConfinement.namespaces."Bad_Name".wireguard.privateKeyFile = "/run/k"; };
      expect = "must match ^[a-z][a-z0-9-]{0,11}$";
    };
    no-tunnel = {
      config = withBase { services.vpnConfinement.namespaces.empty = { }; };
      expect = "no tunnel configured";
    };
    secret-in-store = {
      config = withBase { services.vpnConfinement.namespaces.vpn.wireguard.configFile = "/nix/store/abc-wg.conf"; };
      expect = "points into the world-readable Nix store";
    };
    psk-in-store = {
      config = withBase {
        services.vpnConfinement.namespaces.vpn.wireguard.peers = [
          {
            publicKey = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=";
            endpoint = "198.51.100.1:51820";
            presharedKeyFile = "/nix/store/abc-psk";
          }
        ];
      };
      expect = "wireguard.peers.0.presharedKeyFile points into the world-readable Nix store";
    };
    secret-relative = {
      config = withBase { services.vpnConfinement.namespaces.vpn.wireguard.privateKeyFile = "secrets/vpn.key"; };
      expect = "is relative; use an absolute runtime path";
    };
    same-subnet = {
      config = withBase {
        services.vpnConfinement.namespaces.vpn.hostLink = {
          enable = true;
          hostAddress = "10.200.1.1/30";
          namespaceAddress = "10.200.1.2/30";
        };
        services.vpnConfinement.namespaces.other = {
          wireguard.privateKeyFile = "/run/k";
          hostLink = {
            enable = true;
            hostAddress = "10.200.1.1/30";
            namespaceAddress = "10.200.1.2/30";
          };
        };
      };
      expect = "host-link subnets of namespaces \"other\" (10.200.1.1/30) and \"vpn\" (10.200.1.1/30) overlap";
    };
    overlapping-subnet = {
      config = withBase {
        services.vpnConfinement.namespaces.vpn.hostLink = {
          enable = true;
          hostAddress = "10.200.0.1/16";
          namespaceAddress = "10.200.0.2/16";
        };
        services.vpnConfinement.namespaces.other = {
          wireguard.privateKeyFile = "/run/k";
          hostLink = {
            enable = true;
            hostAddress = "10.200.7.5/30";
            namespaceAddress = "10.200.7.6/30";
          };
        };
      };
      expect = "overlap; give each namespace its own subnet";
    };
    port-twice-within = {
      config = withBase {
        services.vpnConfinement.namespaces.vpn.hostLink = {
          enable = true;
          hostAddress = "10.200.1.1/30";
          namespaceAddress = "10.200.1.2/30";
          portMappings = [
            {
              from = 8080;
              to = 80;
            }
            {
              from = 8080;
              to = 81;
              protocol = "both";
            }
          ];
        };
      };
      expect = "host port tcp/8080 is claimed more than once";
    };
    port-twice-across = {
      config = withBase {
        services.vpnConfinement.namespaces.vpn.hostLink = {
          enable = true;
          hostAddress = "10.200.1.1/30";
          namespaceAddress = "10.200.1.2/30";
          portMappings = [
            {
              from = 51820;
              to = 80;
              protocol = "udp";
            }
          ];
        };
        services.vpnConfinement.namespaces.other.wireguard = {
          privateKeyFile = "/run/k";
          listenPort = 51820;
        };
      };
      expect = "host port udp/51820 is claimed more than once";
    };
    same-interface = {
      config = withBase {
        services.vpnConfinement.namespaces.vpn.interface = "wg0";
        services.vpnConfinement.namespaces.other = {
          interface = "wg0";
          wireguard.privateKeyFile = "/run/k";
        };
      };
      expect = "all use the WireGuard interface name \"wg0\"";
    };
    unknown-namespace = {
      config = withBase {
        systemd.services.web.vpnConfinement = {
          enable = true;
          namespace = "nope";
        };
      };
      expect = "namespace = \"nope\" is not defined";
    };
    ambiguous-namespace = {
      config = withBase {
        services.vpnConfinement.namespaces.other.wireguard.privateKeyFile = "/run/k";
        systemd.services.web.vpnConfinement.enable = true;
      };
      expect = "there is not exactly one namespace to default to";
    };
    module-disabled = {
      config = withBase {
        services.vpnConfinement.enable = false;
        systemd.services.web.vpnConfinement.enable = true;
      };
      expect = "would run UNCONFINED";
    };
    small-mtu-with-ipv6 = {
      config = withBase {
        services.vpnConfinement.namespaces.vpn = {
          wireguard.mtu = 1200;
          ipv6 = "tunnel";
        };
      };
      expect = "is below the IPv6 minimum (1280); set ipv6 = \"block\"";
    };
    immutable-etc = {
      config = withBase {
        system.etc.overlay = {
          enable = true;
          mutable = false;
        };
      };
      expect = "system.etc.overlay.mutable = false makes /etc read-only";
    };
    hostlink-missing-addresses = {
      config = withBase { services.vpnConfinement.namespaces.vpn.hostLink.enable = true; };
      expect = "set hostAddress and namespaceAddress";
    };
  };

  caseFailures = lib.concatLists (
    lib.mapAttrsToList (
      name: c:
      if c.expect == null then
        [ ]
      else
        let
          msgs = failedAssertions (eval c.config);
        in
        lib.optional (!lib.any (m: lib.hasInfix c.expect m) msgs)
          "case ${name}: expected an assertion containing '${c.expect}', got: ${builtins.toJSON msgs}"
    ) cases
  );

  # Properties of the example that the VM tests and the dist/ twin rely on.
  exampleChecks =
    let
      u = example.systemd.services;
      t = u.transmission.serviceConfig;
      p = u.prowlarr.serviceConfig;
      a = u.vpn-agent-proton.serviceConfig;
      expectEq =
        what: got: want:
        lib.optional (got != want) "example: ${what}: got ${builtins.toJSON got}, want ${builtins.toJSON want}";
    in
    lib.concatLists [
      (expectEq "assertions" (failedAssertions example) [ ])
      (expectEq "warnings" example.warnings [ ])
      (expectEq "transmission NetworkNamespacePath" t.NetworkNamespacePath "/run/netns/proton")
      (expectEq "transmission bindsTo" u.transmission.bindsTo [ "vpn-agent-proton.service" ])
      (expectEq "transmission after" u.transmission.after [ "vpn-agent-proton.service" ])
      (expectEq "transmission RestrictNetworkInterfaces" t.RestrictNetworkInterfaces [
        "lo"
        "vc-proton"
        "vn-proton"
      ])
      (expectEq "prowlarr RestrictNetworkInterfaces" p.RestrictNetworkInterfaces [
        "lo"
        "vc-mullvad"
      ])
      (expectEq "transmission BindReadOnlyPaths" t.BindReadOnlyPaths [
        "/etc/netns/proton/resolv.conf:/etc/resolv.conf"
        "/etc/netns/proton/nsswitch.conf:/etc/nsswitch.conf"
      ])
      (expectEq "transmission InaccessiblePaths" t.InaccessiblePaths [
        "-/run/nscd"
        "-/var/run/nscd"
        "-/run/systemd/resolve/io.systemd.Resolve"
        "-/run/systemd/resolve/io.systemd.Resolve.Monitor"
        "-/run/dbus/system_bus_socket"
      ])
      (expectEq "agent before" u.vpn-agent-proton.before [ "transmission.service" ])
      (expectEq "agent Type" a.Type "notify")
      (expectEq "agent PrivateTmp" a.PrivateTmp false)
      (expectEq "agent has no ProtectKernelTunables" (a ? ProtectKernelTunables) false)
      (expectEq "agent has no ReadWritePaths" (a ? ReadWritePaths) false)
      (expectEq "kernel modules (no kernel backend in the example)" example.boot.kernelModules [ ])
      (expectEq "ip_forward" example.boot.kernel.sysctl."net.ipv4.ip_forward" 1)
    ];

  # bypassResolverIsolation drops InaccessiblePaths and warns.
  bypassChecks =
    let
      cfg = eval (withBase {
        systemd.services.web.vpnConfinement = {
          enable = true;
          bypassResolverIsolation = true;
        };
      });
    in
    lib.optional (cfg.systemd.services.web.serviceConfig ? InaccessiblePaths) "bypass: InaccessiblePaths still set"
    ++ lib.optional (
      !lib.any (w: lib.hasInfix "DNS leak" w) cfg.warnings
    ) "bypass: no warning"
    ++ lib.optional (cfg.systemd.services.web.serviceConfig.NetworkNamespacePath != "/run/netns/vpn") "bypass: sole namespace not used as the default";

  kernelChecks =
    let
      cfg = eval (withBase { services.vpnConfinement.namespaces.vpn.backend = "kernel"; });
    in
    lib.optional (cfg.boot.kernelModules != [ "wireguard" ]) "kernel backend: boot.kernelModules should be [ \"wireguard\" ]";
in
{
  example = exampleReport;
  # The assertion messages each negative case produces (for reading).
  caseMessages = lib.mapAttrs (_: c: failedAssertions (eval c.config)) cases;
  failures = caseFailures ++ exampleChecks ++ bypassChecks ++ kernelChecks;
}
