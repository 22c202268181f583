# Evaluation harness for nix/module.nix without nixpkgs.
#
# Evaluates the module with lib.evalModules against small stubs of the NixOS
# options it reads and sets (systemd.services/sockets, assertions, warnings,
# boot.*, environment.systemPackages) and a stub `pkgs`. It proves that the
# module evaluates, shows the units and agent JSON it generates, checks
# that every NixOS-only assertion fires on a config made to trip it, and
# lists the configs (buildCases) that the module's build-time
# `vpn-agent validate` must reject; .ci/nix-check.sh runs the agent on them.
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
  stubs = import ./stubs.nix { inherit libPath; };
  inherit (stubs) lib failedAssertions;
  inherit (lib) mkOption types;
  # The directives the module must have taken over (agent/unit/unit.go).
  units = lib.importJSON ../units.json;

  # --- stub pkgs -------------------------------------------------------------
  pkgs = stubs.modulePkgs // {
    vpn-agent = stubs.drv "vpn-agent-0.1.0";
  };

  # --- stub NixOS options ------------------------------------------------------
  serviceModule = {
    options = stubs.unitOptions // {
      description = mkOption {
        type = types.str;
        default = "";
      };
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
    };
  };
  stubModule = {
    imports = [ { options = stubs.commonOptions; } ];
    options = {
      systemd.services = mkOption {
        type = types.attrsOf (types.submodule serviceModule);
        default = { };
      };
      # What nixpkgs' services.transmission declares that the module reads
      # (portForwarding.transmission.user's default).
      services.transmission.enable = mkOption {
        type = types.bool;
        default = false;
      };
      services.transmission.user = mkOption {
        type = types.str;
        default = "transmission";
      };
      system.etc.overlay.enable = mkOption {
        type = types.bool;
        default = false;
      };
      system.etc.overlay.mutable = mkOption {
        type = types.bool;
        default = true;
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
    # What services.transmission.enable / services.prowlarr.enable define
    # in nixpkgs (here stubs: a description, wantedBy and ExecStart).
    systemd.services.transmission = {
      description = "Transmission BitTorrent Service";
      wantedBy = [ "multi-user.target" ];
      vpnConfinement = {
        enable = true;
        namespace = "proton";
      };
    };
    systemd.services.prowlarr = {
      wantedBy = [ "multi-user.target" ];
      serviceConfig.ExecStart = "/nix/store/00000000000000000000000000000000-prowlarr/bin/Prowlarr";
      vpnConfinement = {
        enable = true;
        namespace = "mullvad";
      };
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

  # --- negative cases ------------------------------------------------------------
  base = {
    services.vpnConfinement.enable = true;
    # A wg-quick file: valid for `validate --static`, which cannot read it.
    services.vpnConfinement.namespaces.vpn = {
      wireguard.configFile = "/run/secrets/vpn.conf";
    };
  };
  withBase = extra: lib.recursiveUpdate base extra;
  # Namespace "other" besides "vpn", each given its own settings.
  twoNamespaces =
    vpn: other:
    withBase {
      services.vpnConfinement.namespaces.vpn = vpn;
      services.vpnConfinement.namespaces.other = {
        wireguard.configFile = "/run/secrets/other.conf";
      }
      // other;
    };
  hostLinkIn = hostAddress: namespaceAddress: extra: {
    hostLink = {
      enable = true;
      inherit hostAddress namespaceAddress;
    }
    // extra;
  };
  peer = extra: {
    publicKey = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=";
    endpoint = "198.51.100.1:51820";
  } // extra;

  # The options of issue 13 (a pool, a probe, metrics) and the JSON they
  # must map to, field for field (newOptionChecks).
  newOptions = {
    wireguard = {
      configFile = null;
      configFiles = [
        "/run/secrets/vpn-ch.conf"
        "/run/secrets/vpn-nl.conf"
      ];
    };
    health.probe = {
      address = "10.2.0.1:53";
      interval = "10s";
      failures = 5;
    };
    metrics.listen = "unix:/run/vpn-confinement/vpn.metrics.sock";
  };
  newOptionsJSON = {
    name = "vpn";
    backend = "auto";
    ipv6 = "auto";
    wireguard.configFiles = [
      "/run/secrets/vpn-ch.conf"
      "/run/secrets/vpn-nl.conf"
    ];
    dns.mode = "strict";
    health.probe = {
      address = "10.2.0.1:53";
      interval = "10s";
      failures = 5;
    };
    metrics.listen = "unix:/run/vpn-confinement/vpn.metrics.sock";
  };
  newOptionChecks =
    let
      got = (eval (withBase { services.vpnConfinement.namespaces.vpn = newOptions; })).services.vpnConfinement.namespaces.vpn.generatedConfig;
      # Unset, they are absent from the JSON (the agent's defaults apply).
      unset = (eval base).services.vpnConfinement.namespaces.vpn.generatedConfig;
      probeOnly =
        (eval (withBase { services.vpnConfinement.namespaces.vpn.health.probe.address = "10.2.0.1"; }))
        .services.vpnConfinement.namespaces.vpn.generatedConfig;
      # Issue 21.3: enable = false is "probe": null (off, not the default).
      probeOff =
        (eval (withBase { services.vpnConfinement.namespaces.vpn.health.probe.enable = false; }))
        .services.vpnConfinement.namespaces.vpn.generatedConfig;
      # Issue 25: health.fast, health.preferFirst and health.standby reach the JSON when
      # set, next to the probe's fields.
      fastPrefer =
        (eval (withBase {
          services.vpnConfinement.namespaces.vpn.health = {
            fast = true;
            preferFirst = false;
            standby = false;
            probe.address = "10.2.0.1:53";
          };
        }))
        .services.vpnConfinement.namespaces.vpn.generatedConfig;
    in
    lib.optional (fastPrefer.health or null != { fast = true; preferFirst = false; standby = false; probe.address = "10.2.0.1:53"; }) "health.fast/preferFirst/standby generated ${builtins.toJSON (fastPrefer.health or null)}"
    ++ lib.optional (got != newOptionsJSON) "new options: generated ${builtins.toJSON got}, want ${builtins.toJSON newOptionsJSON}"
    ++ lib.optional (unset ? health || unset ? metrics || unset.wireguard ? configFiles) "new options: unset, yet in the JSON: ${builtins.toJSON unset}"
    ++ lib.optional (probeOnly.health != { probe.address = "10.2.0.1"; }) "new options: a probe address alone generated ${builtins.toJSON probeOnly.health}"
    ++ lib.optional (!(probeOff ? health) || probeOff.health != { probe = null; }) "health.probe.enable = false generated ${builtins.toJSON (probeOff.health or null)}, want {\"probe\":null}";

  # Issue 24.3: wireguard.pinEndpoints maps to the agent's field when on,
  # and is absent (the agent's default, off) otherwise.
  pinChecks =
    let
      gen =
        v:
        (eval (withBase { services.vpnConfinement.namespaces.vpn.wireguard.pinEndpoints = v; }))
        .services.vpnConfinement.namespaces.vpn.generatedConfig.wireguard;
      unset = (eval base).services.vpnConfinement.namespaces.vpn.generatedConfig.wireguard;
    in
    lib.optional ((gen true).pinEndpoints or null != true) "wireguard.pinEndpoints = true generated ${builtins.toJSON (gen true)}"
    ++ lib.optional ((gen false) ? pinEndpoints || unset ? pinEndpoints) "wireguard.pinEndpoints off, yet in the JSON: ${builtins.toJSON (gen false)}";

  # Port forwarding (issue 14): every option and the JSON it must map to,
  # field for field; enabled alone, "natpmp" with the enums' defaults;
  # disabled, nothing at all (portForwardingChecks).
  pfOptions = {
    portForwarding = {
      enable = true;
      natpmp = {
        gateway = "10.2.0.1";
        style = "rfc";
        internalPort = 51413;
        protocol = "tcp";
        lifetime = "120s";
      };
      transmission = {
        url = "http://127.0.0.1:9091/transmission/rpc";
        credentialsFile = "/run/secrets/transmission-rpc";
        user = "debian-transmission";
      };
      qbittorrent = {
        url = "http://127.0.0.1:8080";
        credentialsFile = "/run/secrets/qbittorrent-webui";
        user = "993";
      };
      onChange = [
        "/run/current-system/sw/bin/port-changed"
        "--flag"
      ];
      onChangeUser = "port-changed";
    };
  };
  # The field names map 1:1: the JSON is the options without `enable`.
  pfJSON = removeAttrs pfOptions.portForwarding [ "enable" ];
  # The example of docs/nixos.md, "Port forwarding (ProtonVPN NAT-PMP)".
  pfExampleConfig = {
    services.vpnConfinement = {
      enable = true;
      namespaces.proton = {
        wireguard.configFile = "/run/secrets/proton.conf";
        portForwarding = {
          enable = true;
          transmission.url = "http://127.0.0.1:9091/transmission/rpc";
        };
      };
    };
    systemd.services.transmission = {
      wantedBy = [ "multi-user.target" ];
      vpnConfinement = {
        enable = true;
        namespace = "proton";
      };
    };
  };
  pfExample = eval pfExampleConfig;
  portForwardingChecks =
    let
      pfOf = cfg: cfg.services.vpnConfinement.namespaces.vpn.generatedConfig.portForwarding or null;
      got = pfOf (eval (withBase { services.vpnConfinement.namespaces.vpn = pfOptions; }));
      defaults = pfOf (eval (withBase { services.vpnConfinement.namespaces.vpn.portForwarding.enable = true; }));
      # Everything but enable: still off.
      off = pfOf (
        eval (withBase {
          services.vpnConfinement.namespaces.vpn = lib.recursiveUpdate pfOptions { portForwarding.enable = false; };
        })
      );
      docs = pfExample.services.vpnConfinement.namespaces.proton.generatedConfig.portForwarding or null;
      # A credentials file without user: services.transmission's user, when
      # it is enabled (the User= of its unit); qbittorrent has no such
      # service here, so its user stays as given.
      withCreds = {
        enable = true;
        transmission = {
          url = "http://127.0.0.1:9091/transmission/rpc";
          credentialsFile = "/run/secrets/transmission-rpc";
        };
      };
      fromService = eval (
        withBase {
          services.vpnConfinement.namespaces.vpn.portForwarding = withCreds;
          services.transmission = {
            enable = true;
            user = "debian-transmission";
          };
        }
      );
      fromServiceUser = (pfOf fromService).transmission.user or null;
      # Without credentials, no user is taken from the service (no check).
      noCreds = pfOf (
        eval (withBase {
          services.vpnConfinement.namespaces.vpn.portForwarding = {
            enable = true;
            transmission.url = "http://127.0.0.1:9091/transmission/rpc";
          };
          services.transmission.enable = true;
        })
      );
      wantDefaults.natpmp = {
        style = "proton";
        protocol = "both";
      };
      wantDocs = wantDefaults // {
        transmission.url = "http://127.0.0.1:9091/transmission/rpc";
      };
    in
    lib.optional (got != pfJSON) "portForwarding: generated ${builtins.toJSON got}, want ${builtins.toJSON pfJSON}"
    ++ lib.optional (defaults != wantDefaults) "portForwarding: enable alone generated ${builtins.toJSON defaults}, want ${builtins.toJSON wantDefaults}"
    ++ lib.optional (off != null) "portForwarding: disabled, yet in the JSON: ${builtins.toJSON off}"
    ++ lib.optional (docs != wantDocs) "portForwarding: the docs example generated ${builtins.toJSON docs}, want ${builtins.toJSON wantDocs}"
    ++ lib.optional (failedAssertions pfExample != [ ] || pfExample.warnings != [ ]) "portForwarding: the docs example trips ${builtins.toJSON (failedAssertions pfExample ++ pfExample.warnings)}"
    ++ lib.optional (fromServiceUser != "debian-transmission") "portForwarding.transmission.user: with a credentials file and services.transmission enabled, generated ${builtins.toJSON fromServiceUser}, want \"debian-transmission\""
    ++ lib.optional (failedAssertions fromService != [ ]) "portForwarding.transmission.user taken from services.transmission, yet ${builtins.toJSON (failedAssertions fromService)}"
    ++ lib.optional (noCreds.transmission != { url = "http://127.0.0.1:9091/transmission/rpc"; }) "portForwarding.transmission without credentials generated ${builtins.toJSON noCreds.transmission}, want the URL alone";
  # memory.packetBuffers (issue 15): a value, and 0 (unbounded), reach the
  # JSON as given; unset, it is absent (the agent's default, 256, applies).
  # hostLink.allowedEgress (issue 24.1): each field maps to the JSON, an
  # unset protocol and empty ports are absent (any protocol), and none at
  # all is no key.
  egressChecks =
    let
      gen =
        v:
        (eval (withBase {
          services.vpnConfinement.namespaces.vpn = hostLinkIn "10.200.1.1/30" "10.200.1.2/30" { allowedEgress = v; };
        })).services.vpnConfinement.namespaces.vpn.generatedConfig.hostLink;
      two = gen [
        {
          cidr = "192.168.1.20/32";
          protocol = "both";
          ports = [ 445 139 ];
        }
        { cidr = "10.200.1.1"; }
      ];
      want = [
        {
          cidr = "192.168.1.20/32";
          protocol = "both";
          ports = [ 445 139 ];
        }
        { cidr = "10.200.1.1"; }
      ];
    in
    lib.optional ((two.allowedEgress or null) != want) "allowedEgress: generated ${builtins.toJSON two}, want ${builtins.toJSON want}"
    ++ lib.optional ((gen [ ]) ? allowedEgress) "allowedEgress: none, yet in the JSON: ${builtins.toJSON (gen [ ])}";

  memoryChecks =
    let
      gen = v: (eval (withBase { services.vpnConfinement.namespaces.vpn.memory.packetBuffers = v; })).services.vpnConfinement.namespaces.vpn.generatedConfig;
      unset = (eval base).services.vpnConfinement.namespaces.vpn.generatedConfig;
    in
    lib.optional ((gen 128).memory or null != { packetBuffers = 128; }) "memory: packetBuffers = 128 generated ${builtins.toJSON (gen 128)}"
    ++ lib.optional ((gen 0).memory or null != { packetBuffers = 0; }) "memory: packetBuffers = 0 (unbounded) generated ${builtins.toJSON (gen 0)}"
    ++ lib.optional (unset ? memory) "memory: unset, yet in the JSON: ${builtins.toJSON unset}";

  # A container qbit confined to namespace vpn, with extra settings.
  confinedContainer =
    extra:
    withBase {
      virtualisation.oci-containers.containers.qbit = {
        image = "lscr.io/linuxserver/qbittorrent";
        vpnConfinement.namespace = "vpn";
      }
      // extra;
    };

  # What only NixOS knows: each must trip a module assertion containing `expect`.
  cases = {
    container-ports = {
      config = confinedContainer { ports = [ "8080:8080" ]; };
      expect = "containers.\"qbit\".ports = [\"8080:8080\"], but a container in namespace \"vpn\" has no podman network to publish ports on; remove ports and publish through services.vpnConfinement.namespaces.vpn.hostLink.portMappings";
    };
    container-docker = {
      config = lib.recursiveUpdate (confinedContainer { }) { virtualisation.oci-containers.backend = "docker"; };
      expect = "virtualisation.oci-containers.backend = \"docker\", but Docker cannot join a named network namespace (/run/netns/vpn); set virtualisation.oci-containers.backend = \"podman\"";
    };
    container-no-namespace = {
      config = confinedContainer { vpnConfinement.namespace = "proton"; };
      expect = "containers.\"qbit\".vpnConfinement.namespace = \"proton\" is not defined; define services.vpnConfinement.namespaces.proton or use one of: vpn.";
    };
    container-privileged = {
      config = confinedContainer { extraOptions = [ "--privileged" ]; };
      expect = "containers.\"qbit\".extraOptions has --privileged, which would undo vpnConfinement";
    };
    container-other-network = {
      config = confinedContainer { extraOptions = [ "--network=host" ]; };
      expect = "extraOptions has --network=host, which would undo vpnConfinement";
    };
    container-module-off = {
      config = {
        virtualisation.oci-containers.containers.qbit = {
          image = "lscr.io/linuxserver/qbittorrent";
          vpnConfinement.namespace = "vpn";
        };
      };
      expect = "vpnConfinement.namespace is set but services.vpnConfinement.enable is false";
    };
    probe-off-and-set = {
      config = withBase {
        services.vpnConfinement.namespaces.vpn.health.probe = {
          enable = false;
          address = "10.2.0.1:53";
        };
      };
      expect = "health.probe.enable = false, but health.probe.address";
    };
    secret-in-store = {
      config = withBase { services.vpnConfinement.namespaces.vpn.wireguard.configFile = "/nix/store/abc-wg.conf"; };
      expect = "points into the world-readable Nix store";
    };
    psk-in-store = {
      config = withBase {
        services.vpnConfinement.namespaces.vpn.wireguard.peers = [ (peer { presharedKeyFile = "/nix/store/abc-psk"; }) ];
      };
      expect = "wireguard.peers.0.presharedKeyFile points into the world-readable Nix store";
    };
    pool-file-in-store = {
      config = withBase {
        services.vpnConfinement.namespaces.vpn.wireguard = {
          configFile = null;
          configFiles = [
            "/run/secrets/a.conf"
            "/nix/store/abc-b.conf"
          ];
        };
      };
      expect = "wireguard.configFiles.1 points into the world-readable Nix store";
    };
    credentials-in-store = {
      config = withBase {
        services.vpnConfinement.namespaces.vpn.portForwarding = {
          enable = true;
          qbittorrent = {
            url = "http://127.0.0.1:8080";
            credentialsFile = "/nix/store/abc-qbt";
            user = "qbittorrent";
          };
        };
      };
      expect = "portForwarding.qbittorrent.credentialsFile points into the world-readable Nix store";
    };
    credentials-without-user = {
      config = withBase {
        services.vpnConfinement.namespaces.vpn.portForwarding = {
          enable = true;
          qbittorrent = {
            url = "http://127.0.0.1:8080";
            credentialsFile = "/run/secrets/qbt";
          };
        };
      };
      expect = "portForwarding.qbittorrent.user is not set, and services.qbittorrent is not enabled";
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
      config = twoNamespaces { } { } // {
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
    immutable-etc = {
      config = withBase {
        system.etc.overlay = {
          enable = true;
          mutable = false;
        };
      };
      expect = "system.etc.overlay.mutable = false makes /etc read-only";
    };
    # Issue 22 item 2: a confined service activated by a socket that is not
    # confined (it would listen on the host), once the module's warning.
    socket-unconfined = {
      config = withBase {
        systemd.services.web.vpnConfinement.enable = true;
        systemd.sockets.web.socketConfig.ListenStream = "8080";
      };
      expect = "socket-activated by systemd.sockets.\"web\", which is not confined: its listening socket would be created in the host's network namespace";
    };
    socket-unconfined-template = {
      config = withBase {
        systemd.services."echo@".vpnConfinement.enable = true;
        systemd.sockets.echo.socketConfig.Accept = true;
      };
      expect = "systemd.services.\"echo@\".vpnConfinement.enable is set but the service is socket-activated by systemd.sockets.\"echo\", which is not confined";
    };
    socket-other-namespace = {
      config = twoNamespaces { } { } // {
        systemd.sockets.web.vpnConfinement = {
          enable = true;
          namespace = "vpn";
        };
        systemd.services.web.vpnConfinement.namespace = "other";
      };
      expect = "systemd.sockets.\"web\".vpnConfinement.namespace is \"vpn\" but the service it activates, web.service, is confined to \"other\"";
    };
    socket-namespace-undefined = {
      config = withBase {
        systemd.sockets.web.vpnConfinement = {
          enable = true;
          namespace = "nope";
        };
      };
      expect = "systemd.sockets.\"web\".vpnConfinement.namespace = \"nope\" is not defined";
    };
    socket-module-disabled = {
      config = withBase {
        services.vpnConfinement.enable = false;
        systemd.sockets.web.vpnConfinement.enable = true;
      };
      expect = "so the socket would listen UNCONFINED";
    };
  };

  # What the agent checks: the module must not assert (it did before issue
  # 11), and the build-time check (configDir: one `vpn-agent validate
  # --static` over every namespace's JSON) must reject it with `expect`.
  # .ci/nix-check.sh runs the agent on the `files` of each.
  buildCases = {
    packet-buffers-too-few = {
      config = withBase { services.vpnConfinement.namespaces.vpn.memory.packetBuffers = 10; };
      expect = "memory.packetBuffers: 10 is out of range; use 64–65536, or 0 for unbounded";
    };
    name-too-long = {
      config = withBase { services.vpnConfinement.namespaces.averyveryverylongname.wireguard.privateKeyFile = "/run/k"; };
      expect = "is 21 characters long; use at most 12";
    };
    name-unsafe = {
      config = withBase { services.vpnConfinement.namespaces."Bad_Name".wireguard.privateKeyFile = "/run/k"; };
      expect = "\"Bad_Name\" has characters that are not allowed";
    };
    no-tunnel = {
      config = withBase { services.vpnConfinement.namespaces.empty = { }; };
      expect = "no tunnel configured";
    };
    secret-relative = {
      config = withBase { services.vpnConfinement.namespaces.vpn.wireguard.privateKeyFile = "secrets/vpn.key"; };
      expect = "wireguard.privateKeyFile: \"secrets/vpn.key\" is relative; use an absolute path";
    };
    small-mtu-with-ipv6 = {
      config = withBase {
        services.vpnConfinement.namespaces.vpn = {
          wireguard.mtu = 1200;
          ipv6 = "tunnel";
        };
      };
      expect = "1200 is below the IPv6 minimum MTU";
    };
    egress-covers-endpoint = {
      config = withBase {
        services.vpnConfinement.namespaces.vpn = {
          wireguard = {
            configFile = null;
            privateKeyFile = "/run/secrets/vpn.key";
            addresses = [ "10.2.0.2/32" ];
            peers = [ (peer { }) ];
          };
          dns.servers = [ "10.2.0.1" ];
        } // hostLinkIn "10.200.1.1/30" "10.200.1.2/30" { allowedEgress = [ { cidr = "198.51.100.0/24"; } ]; };
      };
      expect = "hostLink.allowedEgress[0].cidr: 198.51.100.0/24 contains the WireGuard endpoint 198.51.100.1";
    };
    hostlink-missing-addresses = {
      config = withBase { services.vpnConfinement.namespaces.vpn.hostLink.enable = true; };
      expect = "hostLink.hostAddress: missing; set a CIDR";
    };
    interface-is-veth = {
      config = withBase {
        services.vpnConfinement.namespaces.vpn = {
          interface = "vn-vpn";
        } // hostLinkIn "10.200.1.1/30" "10.200.1.2/30" { };
      };
      expect = "interface: \"vn-vpn\" is the name of the host-link veth";
    };
    port-twice-within = {
      config = withBase {
        services.vpnConfinement.namespaces.vpn = hostLinkIn "10.200.1.1/30" "10.200.1.2/30" {
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
      expect = "host port tcp/8080 is already mapped";
    };
    # Between namespaces: vpn-agent validate --config A --config B.
    same-subnet = {
      config = twoNamespaces (hostLinkIn "10.200.1.1/30" "10.200.1.2/30" { }) (
        hostLinkIn "10.200.1.1/30" "10.200.1.2/30" { }
      );
      expect = "other.json and vpn.json: hostLink.hostAddress: host-link subnets 10.200.1.0/30 and 10.200.1.0/30 overlap; give each namespace its own subnet";
    };
    overlapping-subnet = {
      config = twoNamespaces (hostLinkIn "10.200.0.1/16" "10.200.0.2/16" { }) (
        hostLinkIn "10.200.7.5/30" "10.200.7.6/30" { }
      );
      expect = "host-link subnets 10.200.7.4/30 and 10.200.0.0/16 overlap";
    };
    port-twice-across = {
      config =
        twoNamespaces
          (hostLinkIn "10.200.1.1/30" "10.200.1.2/30" {
            portMappings = [
              {
                from = 51820;
                to = 80;
                protocol = "udp";
              }
            ];
          })
          {
            wireguard = {
              configFile = "/run/secrets/other.conf";
              listenPort = 51820;
            };
          };
      expect = "other.json and vpn.json: wireguard.listenPort / hostLink.portMappings: both use host port udp/51820";
    };
    pool-and-file = {
      config = withBase { services.vpnConfinement.namespaces.vpn.wireguard.configFiles = [ "/run/secrets/b.conf" ]; };
      expect = "wireguard.configFiles: both configFile and configFiles are set";
    };
    probe-address-bad = {
      config = withBase { services.vpnConfinement.namespaces.vpn.health.probe.address = "resolver"; };
      expect = "health.probe.address: \"resolver\" is neither";
    };
    probe-interval-out-of-range = {
      config = withBase {
        services.vpnConfinement.namespaces.vpn.health.probe = {
          address = "10.2.0.1:53";
          interval = "2h";
        };
      };
      expect = "health.probe.interval: 2h0m0s is out of range";
    };
    metrics-listen-bad = {
      config = withBase { services.vpnConfinement.namespaces.vpn.metrics.listen = "localhost"; };
      expect = "metrics.listen: \"localhost\" is not";
    };
    same-metrics-listen = {
      config = twoNamespaces { metrics.listen = "127.0.0.1:9586"; } { metrics.listen = "127.0.0.1:9586"; };
      expect = "metrics.listen: both serve metrics on 127.0.0.1:9586";
    };
    # Positive control: every option of issue 13, accepted by the agent.
    pool-probe-metrics = {
      config = withBase { services.vpnConfinement.namespaces.vpn = newOptions; };
      expect = null;
    };
    # Positive controls: port forwarding with every option, and the docs'
    # example (needs an agent that knows portForwarding, issue 14).
    port-forwarding-all = {
      config = withBase { services.vpnConfinement.namespaces.vpn = pfOptions; };
      expect = null;
    };
    port-forwarding-example = {
      config = pfExampleConfig;
      expect = null;
    };
    same-interface = {
      config = twoNamespaces { interface = "wg0"; } { interface = "wg0"; };
      expect = "other.json and vpn.json: interface: both use the interface name \"wg0\"";
    };
  };

  caseFailures = lib.concatLists (
    lib.mapAttrsToList (
      name: c:
      let
        msgs = failedAssertions (eval c.config);
      in
      lib.optional (!lib.any (m: lib.hasInfix c.expect m) msgs)
        "case ${name}: expected an assertion containing '${c.expect}', got: ${builtins.toJSON msgs}"
    ) cases
  );

  # The build-time check of a configuration: the files it validates and
  # the command line (every namespace in one `vpn-agent validate`).
  buildCheck =
    cfg:
    let
      vc = cfg.services.vpnConfinement;
    in
    {
      files = lib.mapAttrs' (name: ns: lib.nameValuePair "${name}.json" ns.generatedConfig) vc.namespaces;
      inherit (vc.configDir) script;
      validate = map (n: "--config ${lib.escapeShellArg "${n}.json"}") (lib.attrNames vc.namespaces);
    };
  buildReports = lib.mapAttrs (
    _: c:
    let
      cfg = eval c.config;
    in
    buildCheck cfg
    // {
      inherit (c) expect;
      assertions = failedAssertions cfg;
    }
  ) buildCases;
  buildCaseFailures = lib.concatLists (
    lib.mapAttrsToList (
      name: r:
      lib.optional (r.assertions != [ ]) "build case ${name}: the module asserts (${builtins.toJSON r.assertions}); the agent's check should find it"
      ++ lib.optional (
        !lib.hasInfix "vpn-agent validate --static ${lib.concatStringsSep " " r.validate}" r.script
      ) "build case ${name}: configDir does not validate all namespaces in one call: ${r.script}"
    ) buildReports
  );

  # Properties of the example that the VM tests and the dist/ twin rely on.
  # The directives come from units.json; the literal values check that the
  # module fills its placeholders.
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
      (expectEq "transmission partOf" u.transmission.partOf [ "vpn-agent-proton.service" ])
      (expectEq "transmission upheldBy (Upholds= restarts a stopped service)" u.transmission.upheldBy [ ])
      (expectEq "mullvad agent wants (restartWithAgent)" u.vpn-agent-mullvad.wants [
        "network-online.target"
        "prowlarr.service"
      ])
      # No RestrictNetworkInterfaces=: systemd resolves the names in PID 1's namespace, where
      # vc-NAME and vn-NAME do not exist, and with BPF lets the service use lo only.
      (expectEq "transmission has no RestrictNetworkInterfaces" (t ? RestrictNetworkInterfaces) false)
      (expectEq "prowlarr has no RestrictNetworkInterfaces" (p ? RestrictNetworkInterfaces) false)
      (expectEq "transmission BindReadOnlyPaths" t.BindReadOnlyPaths [
        "/etc/netns/proton/resolv.conf:/etc/resolv.conf"
        "/etc/netns/proton/nsswitch.conf:/etc/nsswitch.conf"
        "/etc/netns/proton/resolv.conf:/run/systemd/resolve/stub-resolv.conf"
        "/etc/netns/proton/resolv.conf:/run/systemd/resolve/resolv.conf"
      ])
      (expectEq "transmission serviceConfig keys" (lib.attrNames t) (lib.attrNames units.confined.Service))
      (expectEq "transmission TemporaryFileSystem" t.TemporaryFileSystem units.confined.Service.TemporaryFileSystem)
      (expectEq "agent before" u.vpn-agent-proton.before [ "transmission.service" ])
      (expectEq "agent after" u.vpn-agent-proton.after units.agent.Unit.After)
      (expectEq "agent wants (units.json's, then restartWithAgent's)" u.vpn-agent-proton.wants (
        units.agent.Unit.Wants ++ [ "transmission.service" ]
      ))
      (expectEq "agent wantedBy" u.vpn-agent-proton.wantedBy units.agent.Install.WantedBy)
      (expectEq "agent description" u.vpn-agent-proton.description "VPN confinement namespace proton (WireGuard tunnel and kill switch)")
      (expectEq "agent serviceConfig (but ExecStart)" (removeAttrs a [ "ExecStart" ]) (
        removeAttrs units.agent.Service [ "ExecStart" ]
      ))
      (expectEq "agent ExecStart" a.ExecStart "${pkgs.vpn-agent}/bin/vpn-agent run --config ${example.services.vpnConfinement.configDir}/proton.json")
      (expectEq "agent Type" a.Type "notify")
      (expectEq "agent PrivateTmp" a.PrivateTmp false)
      (expectEq "agent has no ProtectKernelTunables" (a ? ProtectKernelTunables) false)
      (expectEq "agent has no ReadWritePaths" (a ? ReadWritePaths) false)
      (expectEq "kernel modules (no kernel backend in the example)" example.boot.kernelModules [ ])
      (expectEq "ip_forward is left to the agent" (example.boot.kernel.sysctl ? "net.ipv4.ip_forward") false)
      (expectEq "build check of the example" (buildCheck example).validate [
        "--config mullvad.json"
        "--config proton.json"
      ])
    ];

  # bypassResolverIsolation drops the resolver entries of InaccessiblePaths
  # (the WireGuard control sockets stay hidden) and warns.
  bypassChecks =
    let
      cfg = eval (withBase {
        systemd.services.web.vpnConfinement = {
          enable = true;
          bypassResolverIsolation = true;
        };
      });
    in
    lib.optional (
      cfg.systemd.services.web.serviceConfig.TemporaryFileSystem != [ "/var/run/wireguard:ro,mode=0755" ]
    ) "bypass: TemporaryFileSystem is not just the WireGuard control sockets"
    ++ lib.optional (
      cfg.systemd.services.web.serviceConfig.BindReadOnlyPaths != [
        "/etc/netns/vpn/resolv.conf:/etc/resolv.conf"
        "/etc/netns/vpn/nsswitch.conf:/etc/nsswitch.conf"
      ]
    ) "bypass: BindReadOnlyPaths still binds into resolved's (unmasked) directory"
    ++ lib.optional (
      !lib.any (w: lib.hasInfix "DNS leak" w) cfg.warnings
    ) "bypass: no warning"
    ++ lib.optional (cfg.systemd.services.web.serviceConfig.NetworkNamespacePath != "/run/netns/vpn") "bypass: sole namespace not used as the default";

  # metrics.listen on every address of the host warns (issue 20), as
  # `vpn-agent validate` does; a loopback address does not.
  metricsWarningChecks =
    let
      warned =
        listen:
        lib.any (w: lib.hasInfix "metrics.listen" w && lib.hasInfix "without authentication" w) (
          eval (withBase { services.vpnConfinement.namespaces.vpn.metrics.listen = listen; })
        ).warnings;
    in
    lib.concatMap (l: lib.optional (!warned l) "metrics.listen ${l}: no warning") [
      "0.0.0.0:9586"
      "[::]:9586"
    ]
    ++ lib.concatMap (l: lib.optional (warned l) "metrics.listen ${l}: a warning") [
      "127.0.0.1:9586"
      "unix:/run/vpn-confinement/vpn.metrics.sock"
    ];

  # restartWithAgent (issue 12 item 20): the agent wants only long-running
  # services something starts; never a template, a oneshot, a socket- or
  # timer-activated unit; false opts out; true on a oneshot is refused.
  restartChecks =
    let
      confined =
        extra:
        lib.recursiveUpdate {
          vpnConfinement.enable = true;
          wantedBy = [ "multi-user.target" ];
        } extra;
      cfg = eval (withBase {
        systemd.services = {
          daemon = confined { };
          "probe@" = confined { };
          job = confined { serviceConfig.Type = "oneshot"; };
          sock = confined { };
          timed = confined { };
          manual = confined { wantedBy = [ ]; };
          optout = confined { vpnConfinement.restartWithAgent = false; };
          forced = confined {
            wantedBy = [ ];
            vpnConfinement.restartWithAgent = true;
          };
        };
        systemd.sockets.sock.socketConfig.NetworkNamespacePath = "/run/netns/vpn";
        systemd.timers.timed.wantedBy = [ "timers.target" ];
      });
      bad = eval (withBase {
        systemd.services.job = {
          vpnConfinement.enable = true;
          vpnConfinement.restartWithAgent = true;
          serviceConfig.Type = "oneshot";
        };
      });
      wants = cfg.systemd.services.vpn-agent-vpn.wants;
    in
    lib.optional (wants != [
      "network-online.target"
      "daemon.service"
      "forced.service"
    ]) "restartWithAgent: the agent wants ${builtins.toJSON wants}, want network-online.target, daemon, forced"
    ++ lib.optional (lib.any (s: s.upheldBy != [ ]) (lib.attrValues cfg.systemd.services)) "restartWithAgent: a service is upheld"
    ++ lib.optional (
      !lib.any (m: lib.hasInfix "restartWithAgent = true, but the service is Type=oneshot" m) (failedAssertions bad)
    ) "restartWithAgent = true on a oneshot: no assertion (got ${builtins.toJSON (failedAssertions bad)})";

  # The drop-in's SystemCallFilter "~" lines (io_uring, ptrace, pidfd:
  # issue 20) come after a service's own allow list, whichever module
  # defines it: an allow-list line after them would allow the calls again.
  syscallFilterChecks =
    let
      cfg = eval (withBase {
        systemd.services.web = {
          vpnConfinement.enable = true;
          serviceConfig.SystemCallFilter = [ "@system-service" ];
        };
        systemd.services.plain.vpnConfinement.enable = true;
      });
      got = cfg.systemd.services.web.serviceConfig.SystemCallFilter;
      want = [ "@system-service" ] ++ units.confined.Service.SystemCallFilter;
    in
    lib.optional (got != want) "SystemCallFilter of a service with its own allow list: got ${builtins.toJSON got}, want ${builtins.toJSON want}"
    ++ lib.optional (
      cfg.systemd.services.plain.serviceConfig.SystemCallFilter != units.confined.Service.SystemCallFilter
    ) "SystemCallFilter of a confined service: not the drop-in's"
    ++ lib.optional (
      cfg.systemd.services.web.serviceConfig.ProtectProc != "invisible"
    ) "ProtectProc of a confined service is not invisible"
    ++ lib.optional (
      cfg.systemd.services.web.serviceConfig.SystemCallErrorNumber != "EPERM"
    ) "SystemCallErrorNumber of a confined service is not EPERM (a refused call would kill it)";

  # systemd.sockets.<name>.vpnConfinement (issue 22 item 2): the socket
  # gets units.json's confinedSocket, the service it activates (NAME, or
  # NAME@ with Accept=yes) the confining drop-in, the agent wants the
  # sockets something starts; no assertion, no warning. A hand-set
  # NetworkNamespacePath of the same namespace is accepted too (what the
  # module's former warning asked for).
  socketChecks =
    let
      cfg = eval (withBase {
        systemd.sockets.web = {
          vpnConfinement.enable = true;
          wantedBy = [ "sockets.target" ];
          socketConfig.ListenStream = "8080";
        };
        systemd.sockets.echo = {
          vpnConfinement.enable = true;
          socketConfig.Accept = true;
        };
      });
      byHand = eval (withBase {
        systemd.services.web.vpnConfinement.enable = true;
        systemd.sockets.web.socketConfig.NetworkNamespacePath = "/run/netns/vpn";
      });
      web = cfg.systemd.sockets.web;
      agent = [ "vpn-agent-vpn.service" ];
      want = {
        socketConfig = {
          ListenStream = "8080";
          NetworkNamespacePath = "/run/netns/vpn";
        };
        bindsTo = agent;
        after = agent;
        partOf = agent;
        before = [ "shutdown.target" ];
        unitConfig = {
          DefaultDependencies = false;
          Conflicts = [ "shutdown.target" ];
        };
      };
      got = lib.mapAttrs (k: _: web.${k}) want;
      confined = svc: (cfg.systemd.services.${svc}.serviceConfig.NetworkNamespacePath or null) == "/run/netns/vpn";
    in
    lib.optional (got != want) "socket: got ${builtins.toJSON got}, want ${builtins.toJSON want}"
    ++ lib.optional (
      units.confinedSocket.Unit.DefaultDependencies != false
    ) "socket: units.json's DefaultDependencies is not false"
    ++ lib.optional (!confined "web") "socket: the service it activates, web, is not confined"
    ++ lib.optional (!confined "echo@") "socket: with Accept=yes the template echo@ is not confined"
    ++ lib.optional (cfg.systemd.services ? echo) "socket: with Accept=yes a service echo (not echo@) was confined"
    ++ lib.optional (
      cfg.systemd.services.web.serviceConfig.TemporaryFileSystem != units.confined.Service.TemporaryFileSystem
    ) "socket: the activated service lacks the drop-in's resolver masks"
    ++ lib.optional (
      cfg.systemd.services.vpn-agent-vpn.wants != [
        "network-online.target"
        "web.socket"
      ]
    ) "socket: the agent wants ${builtins.toJSON cfg.systemd.services.vpn-agent-vpn.wants}, want network-online.target, web.socket (not echo.socket: nothing starts it; not web.service: the socket starts it)"
    ++ lib.optional (failedAssertions cfg != [ ]) "socket: assertions ${builtins.toJSON (failedAssertions cfg)}"
    ++ lib.optional (failedAssertions byHand != [ ]) "socket by hand: assertions ${builtins.toJSON (failedAssertions byHand)}"
    ++ lib.optional (lib.any (w: lib.hasInfix "socket" w) (cfg.warnings ++ byHand.warnings)) "socket: a warning";

  # nscd keeps /run/nscd, the confined services' mask (issue 12 item 21).
  nscdChecks =
    let
      cfg = eval (withBase { services.nscd.enable = true; });
      off = eval base;
    in
    lib.optional (
      (cfg.systemd.services.nscd.serviceConfig.RuntimeDirectoryPreserve or null) != true
    ) "nscd: RuntimeDirectoryPreserve is not set (a restart would unmask /run/nscd)"
    ++ lib.optional (off.systemd.services ? nscd) "nscd: a unit is defined although services.nscd is off";

  # A confined container (issue 22 item 1): the podman flags of
  # units.json in extraOptions after the user's own, its unit bound to the
  # agent, which starts it (autoStart) or not; an unconfined one untouched.
  podmanChecks =
    let
      cfg = eval (withBase {
        virtualisation.oci-containers.containers = {
          qbit = {
            image = "lscr.io/linuxserver/qbittorrent";
            vpnConfinement.namespace = "vpn";
            extraOptions = [ "--ulimit=nofile=1024:1024" ];
          };
          manual = {
            image = "busybox";
            vpnConfinement.namespace = "vpn";
            autoStart = false;
          };
          plain.image = "busybox";
        };
      });
      c = cfg.virtualisation.oci-containers.containers;
      u = cfg.systemd.services;
      agent = [ "vpn-agent-vpn.service" ];
      want = [
        "--ulimit=nofile=1024:1024"
        "--network=ns:/run/netns/vpn"
        "--volume=/etc/netns/vpn/resolv.conf:/etc/resolv.conf:ro"
        "--volume=/etc/netns/vpn/nsswitch.conf:/etc/nsswitch.conf:ro"
        "--volume=/etc/netns/vpn/resolv.conf:/run/systemd/resolve/stub-resolv.conf:ro"
        "--volume=/etc/netns/vpn/resolv.conf:/run/systemd/resolve/resolv.conf:ro"
        "--tmpfs=/run/nscd:ro,mode=0755"
        "--tmpfs=/run/systemd/resolve:ro,mode=0755"
        "--tmpfs=/run/dbus:ro,mode=0755"
        "--tmpfs=/var/run/wireguard:ro,mode=0755"
        "--cap-drop=NET_ADMIN"
        "--cap-drop=NET_RAW"
      ];
      check = what: got: w: lib.optional (got != w) "podman: ${what}: got ${builtins.toJSON got}, want ${builtins.toJSON w}";
    in
    check "assertions" (failedAssertions cfg) [ ]
    ++ check "qbit extraOptions" c.qbit.extraOptions want
    ++ check "plain extraOptions" c.plain.extraOptions [ ]
    ++ check "podman-qbit bindsTo" u.podman-qbit.bindsTo agent
    ++ check "podman-qbit after" u.podman-qbit.after agent
    ++ check "podman-qbit partOf" u.podman-qbit.partOf agent
    ++ check "podman-manual bindsTo" u.podman-manual.bindsTo agent
    ++ check "podman-plain defined" (u ? podman-plain) false
    ++ check "agent wants (autoStart containers)" u.vpn-agent-vpn.wants [
      "network-online.target"
      "podman-qbit.service"
    ];

  # The Prometheus rules and the Grafana dashboard: read-only paths into
  # the agent's package, where nix/package.nix installs them from dist/.
  monitoringChecks =
    let
      vc = example.services.vpnConfinement;
      share = "${pkgs.vpn-agent}/share/vpn-confinement";
      set =
        opt:
        (builtins.tryEval (
          builtins.deepSeq (eval (withBase { services.vpnConfinement.${opt} = "/etc/mine"; })).services.vpnConfinement.${opt} true
        )).success;
      check = what: got: want: lib.optional (got != want) "monitoring: ${what}: got ${builtins.toJSON got}, want ${builtins.toJSON want}";
      installs = file: lib.hasInfix "dist/${file} \"$out/share/vpn-confinement/${file}\"" (builtins.readFile ../package.nix);
    in
    check "prometheusRules" vc.prometheusRules "${share}/prometheus/alerts.yml"
    ++ check "grafanaDashboards" vc.grafanaDashboards "${share}/grafana"
    ++ check "prometheusRules can be set" (set "prometheusRules") false
    ++ check "grafanaDashboards can be set" (set "grafanaDashboards") false
    ++ check "package.nix installs prometheus/alerts.yml" (installs "prometheus/alerts.yml") true
    ++ check "package.nix installs grafana/vpn-confinement.json" (installs "grafana/vpn-confinement.json") true
    ++ check "dist/prometheus/alerts.yml exists" (builtins.pathExists ../../dist/prometheus/alerts.yml) true
    ++ check "dist/grafana/vpn-confinement.json exists" (builtins.pathExists ../../dist/grafana/vpn-confinement.json) true;

  kernelChecks =
    let
      cfg = eval (withBase { services.vpnConfinement.namespaces.vpn.backend = "kernel"; });
    in
    lib.optional (cfg.boot.kernelModules != [ "wireguard" ]) "kernel backend: boot.kernelModules should be [ \"wireguard\" ]";
in
{
  example = exampleReport;
  # The agent config of docs/nixos.md's port-forwarding example.
  portForwardingExample = pfExample.services.vpnConfinement.namespaces.proton.generatedConfig;
  # The assertion messages each negative case produces (for reading).
  caseMessages = lib.mapAttrs (_: c: failedAssertions (eval c.config)) cases;
  # name -> { files = { "NAME.json" = config; }; expect; ... }: what the
  # build-time check validates, for .ci/nix-check.sh to run the agent on.
  # The example passes it (expect = null), the positive control.
  buildCases = buildReports // {
    example = buildCheck example // {
      expect = null;
      assertions = [ ];
    };
  };
  failures =
    caseFailures
    ++ buildCaseFailures
    ++ exampleChecks
    ++ bypassChecks
    ++ metricsWarningChecks
    ++ restartChecks
    ++ syscallFilterChecks
    ++ nscdChecks
    ++ socketChecks
    ++ kernelChecks
    ++ monitoringChecks
    ++ podmanChecks
    ++ newOptionChecks
    ++ pinChecks
    ++ portForwardingChecks
    ++ memoryChecks
    ++ egressChecks;
}
