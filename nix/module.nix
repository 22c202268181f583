# NixOS module: services.vpnConfinement.
#
# One `vpn-agent-<name>` unit per namespace runs `vpn-agent run` with a JSON
# config generated from services.vpnConfinement.namespaces.<name> (field names
# map 1:1 onto agent/config/config.go). Services opt in with
# `systemd.services.<svc>.vpnConfinement.enable = true`.
#
# TWIN: dist/systemd/vpn-agent@.service and dist/systemd/confine.conf.example
# carry the same unit semantics for non-NixOS hosts (and `vpn-agent unit`
# generates the same drop-in). Change them together.
{
  config,
  lib,
  pkgs,
  ...
}:

let
  inherit (lib)
    any
    attrNames
    attrValues
    concatLists
    concatMap
    concatMapStringsSep
    concatStringsSep
    elem
    filter
    filterAttrs
    flatten
    hasPrefix
    hasSuffix
    imap0
    length
    literalExpression
    mapAttrs'
    mapAttrsToList
    mkDefault
    mkEnableOption
    mkIf
    mkMerge
    mkOption
    mkPackageOption
    nameValuePair
    optional
    optionals
    types
    ;

  cfg = config.services.vpnConfinement;
  jsonFormat = pkgs.formats.json { };

  # Fixed naming scheme (docs/architecture.md): everything derives from the
  # namespace name.
  nameRegex = "[a-z][a-z0-9-]{0,11}";
  ifnameRegex = "[A-Za-z0-9_.-]{1,15}";
  maxNameLen = 12;
  netnsPath = name: "/run/netns/${name}";
  agentUnit = name: "vpn-agent-${name}";
  wgIfOf = name: ns: if ns != null && ns.interface != null then ns.interface else "vc-${name}";
  nsVeth = name: "vn-${name}";

  # Paths whose daemons answer name lookups outside the tunnel. A confined
  # service must not reach them (nscd is on by default on NixOS).
  # Same order as the drop-in `vpn-agent unit` prints (agent/cli/unit.go).
  resolverIpcPaths = [
    "-/run/nscd"
    "-/var/run/nscd"
    # resolved's sockets only: where /etc/resolv.conf is a symlink into
    # /run/systemd/resolve, the resolv.conf bind mount lands in that directory.
    "-/run/systemd/resolve/io.systemd.Resolve"
    "-/run/systemd/resolve/io.systemd.Resolve.Monitor"
    "-/run/dbus/system_bus_socket"
  ];

  storePrefix = "${builtins.storeDir}/";

  # ---- JSON generation ----------------------------------------------------

  # The agent's decoder is strict: drop nulls and empty lists/sets rather
  # than sending zero values it would have to interpret.
  isEmpty = v: v == null || v == [ ] || v == { };
  clean = filterAttrs (_: v: !isEmpty v);

  peerJSON =
    p:
    clean {
      inherit (p)
        publicKey
        presharedKeyFile
        endpoint
        allowedIPs
        persistentKeepalive
        ;
    };

  mkAgentConfig =
    name: ns:
    clean {
      inherit name;
      inherit (ns) backend interface ipv6;
      # Always present: the agent reports "no tunnel configured" for {}.
      wireguard = clean {
        inherit (ns.wireguard)
          configFile
          privateKeyFile
          addresses
          mtu
          listenPort
          fwMark
          ;
        peers = map peerJSON ns.wireguard.peers;
      };
      dns = clean { inherit (ns.dns) mode servers search; };
      openPorts = map (p: { inherit (p) port protocol; }) ns.openPorts;
      hostLink =
        if ns.hostLink.enable then
          clean {
            enable = true;
            inherit (ns.hostLink)
              hostAddress
              namespaceAddress
              accessibleFrom
              ;
            portMappings = map (m: { inherit (m) from to protocol; }) ns.hostLink.portMappings;
          }
        else
          null;
    };

  # Build-time validation: a config the agent rejects fails nixos-rebuild.
  # --static: runtime secrets (key files, wg-quick file) are not read.
  canRunAgent = pkgs.stdenv.buildPlatform.canExecute pkgs.stdenv.hostPlatform;
  checkedConfigFile =
    name: file:
    if !cfg.checkConfig || !canRunAgent then
      file
    else
      pkgs.runCommand "vpn-confinement-${name}.json"
        {
          preferLocalBuild = true;
          allowSubstitutes = false;
        }
        ''
          if ! ${cfg.package}/bin/vpn-agent validate --static --config ${file}; then
            echo "services.vpnConfinement.namespaces.${name}: vpn-agent rejected the generated config (error above)." >&2
            echo "Fix the option named in the error, or set services.vpnConfinement.checkConfig = false to skip this check." >&2
            exit 1
          fi
          cp ${file} $out
        '';

  # ---- IPv4 CIDR arithmetic (for overlap assertions) ------------------------

  parseCidr4 =
    s:
    let
      m = if s == null then null else builtins.match "([0-9]{1,3})\\.([0-9]{1,3})\\.([0-9]{1,3})\\.([0-9]{1,3})/([0-9]{1,2})" s;
      n = map lib.toIntBase10 m;
      o = i: builtins.elemAt n i;
    in
    if m == null || any (x: x > 255) (lib.take 4 n) || o 4 > 32 then
      null
    else
      {
        addr = ((o 0 * 256 + o 1) * 256 + o 2) * 256 + o 3;
        len = o 4;
        text = s;
      };
  pow2 = k: lib.foldl' (acc: _: acc * 2) 1 (lib.range 1 k);
  netOf = addr: len: (addr / pow2 (32 - len)) * pow2 (32 - len);
  overlaps4 =
    a: b:
    let
      l = lib.min a.len b.len;
    in
    netOf a.addr l == netOf b.addr l;

  # ---- option types -----------------------------------------------------------

  secretPathType = types.nullOr types.str;

  protocolOption = mkOption {
    type = types.enum [
      "tcp"
      "udp"
      "both"
    ];
    default = "tcp";
    example = "both";
    description = "Transport protocol: `tcp`, `udp`, or `both`.";
  };

  peerModule = {
    options = {
      publicKey = mkOption {
        type = types.str;
        example = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=";
        description = "The peer's base64 public key (44 characters).";
      };
      presharedKeyFile = mkOption {
        type = secretPathType;
        default = null;
        example = "/run/secrets/vpn-psk";
        description = ''
          Runtime path of a file holding the base64 preshared key (mode 0600).
          A plain string, never copied to the Nix store; it must be absolute
          and outside /nix/store.
        '';
      };
      endpoint = mkOption {
        type = types.str;
        example = "198.51.100.1:51820";
        description = "The peer's `host:port` (IPv6: `[2001:db8::1]:51820`).";
      };
      allowedIPs = mkOption {
        type = types.listOf types.str;
        default = [
          "0.0.0.0/0"
          "::/0"
        ];
        example = [ "0.0.0.0/0" ];
        description = ''
          Destinations routed to this peer. Together, the peers must cover the
          whole address space of every tunnelled family: the namespace has no
          other way out.
        '';
      };
      persistentKeepalive = mkOption {
        type = types.nullOr (types.ints.between 0 65535);
        default = null;
        example = 25;
        description = "Keepalive interval in seconds (`null`: off).";
      };
    };
  };

  portModule = {
    options = {
      port = mkOption {
        type = types.port;
        example = 51413;
        description = "Port on the tunnel address that accepts new inbound connections.";
      };
      protocol = protocolOption;
    };
  };

  portMappingModule = {
    options = {
      from = mkOption {
        type = types.port;
        example = 9091;
        description = "Port on the host that is forwarded into the namespace.";
      };
      to = mkOption {
        type = types.port;
        example = 9091;
        description = "Port inside the namespace that receives the forwarded connections.";
      };
      protocol = protocolOption;
    };
  };

  namespaceModule =
    { name, config, ... }:
    {
      options = {
        backend = mkOption {
          type = types.enum [
            "auto"
            "kernel"
            "userspace"
          ];
          default = "auto";
          example = "userspace";
          description = ''
            WireGuard implementation: `kernel` (the wireguard module),
            `userspace` (wireguard-go embedded in the agent, needs /dev/net/tun),
            or `auto` (kernel when available, otherwise userspace).
          '';
        };

        interface = mkOption {
          type = types.nullOr types.str;
          default = null;
          example = "wg-proton";
          description = ''
            Name of the WireGuard interface (at most 15 characters).
            `null` means `vc-<name>`.
          '';
        };

        wireguard = {
          configFile = mkOption {
            type = secretPathType;
            default = null;
            example = "/run/secrets/proton.conf";
            description = ''
              Runtime path of a wg-quick file (it holds the private key, so it is
              a secret: mode 0600, absolute, outside /nix/store; a plain string
              so it is never copied to the store). Its PreUp/PostUp hooks are
              never run. The structured options below override its values.
              Set this or {option}`privateKeyFile`.
            '';
          };
          privateKeyFile = mkOption {
            type = secretPathType;
            default = null;
            example = "/run/secrets/proton.key";
            description = ''
              Runtime path of a file holding the base64 private key (as written
              by `wg genkey`; mode 0600, absolute, outside /nix/store).
              Overrides the wg-quick file's key.
            '';
          };
          addresses = mkOption {
            type = types.listOf types.str;
            default = [ ];
            example = [
              "10.2.0.2/32"
              "fd00::2/128"
            ];
            description = "Tunnel addresses (CIDR). Override the wg-quick file's `Address =`.";
          };
          mtu = mkOption {
            type = types.nullOr (types.ints.between 576 9000);
            default = null;
            example = 1280;
            description = ''
              Tunnel MTU (`null`: the file's, else 1420). Lower it on small
              uplinks (uplink MTU minus 80). Below 1280 only with IPv6 blocked.
            '';
          };
          listenPort = mkOption {
            type = types.nullOr types.port;
            default = null;
            example = 51820;
            description = "UDP port of the tunnel socket on the host (`null`: random).";
          };
          fwMark = mkOption {
            type = types.nullOr types.ints.u32;
            default = null;
            example = 51820;
            description = "Firewall mark on the tunnel's encrypted packets (`null`: none).";
          };
          peers = mkOption {
            type = types.listOf (types.submodule peerModule);
            default = [ ];
            example = literalExpression ''
              [ {
                publicKey = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=";
                endpoint = "198.51.100.1:51820";
                persistentKeepalive = 25;
              } ]
            '';
            description = "Peers. Override the wg-quick file's `[Peer]` sections.";
          };
        };

        ipv6 = mkOption {
          type = types.enum [
            "auto"
            "tunnel"
            "block"
          ];
          default = "auto";
          example = "block";
          description = ''
            `tunnel`: carry IPv6 through the tunnel; `block`: drop all
            non-loopback IPv6 in the namespace; `auto`: tunnel when the tunnel
            has an IPv6 address and the peers cover ::/0, block otherwise.
          '';
        };

        dns = {
          mode = mkOption {
            type = types.enum [
              "strict"
              "tunnel"
            ];
            default = "strict";
            example = "tunnel";
            description = ''
              `strict`: DNS only to {option}`dns.servers` (or the file's `DNS =`),
              only through the tunnel. `tunnel`: DNS to any address, but only
              through the tunnel (for a resolver of your own in the namespace).
            '';
          };
          servers = mkOption {
            type = types.listOf types.str;
            default = [ ];
            example = [ "10.2.0.1" ];
            description = "Resolvers inside the tunnel (at most 3). Override the file's `DNS =`.";
          };
          search = mkOption {
            type = types.listOf types.str;
            default = [ ];
            example = [ "internal.example" ];
            description = "Search domains written to the namespace's resolv.conf.";
          };
        };

        openPorts = mkOption {
          type = types.listOf (types.submodule portModule);
          default = [ ];
          example = literalExpression ''[ { port = 51413; protocol = "both"; } ]'';
          description = ''
            Ports on the tunnel address that accept new inbound connections
            (e.g. a torrent client's port forwarded by the provider).
          '';
        };

        hostLink = {
          enable = mkEnableOption ''
            a veth pair between the host and the namespace that carries only
            inbound connections to {option}`portMappings` and their replies
            (for web UIs)
          '';
          hostAddress = mkOption {
            type = types.nullOr types.str;
            default = null;
            example = "10.200.1.1/30";
            description = "Host side of the link (CIDR, IPv4, /8–/30). Each namespace needs its own subnet.";
          };
          namespaceAddress = mkOption {
            type = types.nullOr types.str;
            default = null;
            example = "10.200.1.2/30";
            description = "Namespace side of the link, in the same subnet as {option}`hostAddress`.";
          };
          accessibleFrom = mkOption {
            type = types.listOf types.str;
            default = [ ];
            example = [ "192.168.1.0/24" ];
            description = ''
              IPv4 sources (CIDRs) allowed to use the port mappings. Never a
              default route; must not contain the tunnel's addresses, the DNS
              servers or the WireGuard endpoint.
            '';
          };
          portMappings = mkOption {
            type = types.listOf (types.submodule portMappingModule);
            default = [ ];
            example = literalExpression ''[ { from = 9091; to = 9091; } ]'';
            description = "Host ports forwarded to namespace ports. A host port may be mapped once across all namespaces.";
          };
        };

        generatedConfig = mkOption {
          type = jsonFormat.type;
          readOnly = true;
          default = mkAgentConfig name config;
          defaultText = literalExpression "the agent JSON built from the options above";
          description = ''
            The agent configuration generated from this namespace's options
            (read-only; handy with `nix eval`).
          '';
        };
      };
    };

  # ---- derived views -----------------------------------------------------------

  namespaceNames = attrNames cfg.namespaces;
  soleNamespace = if length namespaceNames == 1 then builtins.head namespaceNames else null;
  effectiveNs = vc: if vc.namespace != null then vc.namespace else soleNamespace;

  confinedServices = filterAttrs (_: s: s.vpnConfinement.enable) config.systemd.services;
  servicesOf =
    nsName:
    attrNames (
      filterAttrs (n: s: effectiveNs s.vpnConfinement == nsName && !(hasSuffix "@" n)) confinedServices
    );

  configFiles = lib.mapAttrs (
    name: ns: checkedConfigFile name (jsonFormat.generate "vpn-confinement-${name}-unchecked.json" ns.generatedConfig)
  ) cfg.namespaces;

  # ---- assertions -----------------------------------------------------------------

  opt = name: "services.vpnConfinement.namespaces.${builtins.toJSON name}";

  secretAssertions =
    name: ns:
    let
      paths = [
        {
          field = "wireguard.configFile";
          value = ns.wireguard.configFile;
        }
        {
          field = "wireguard.privateKeyFile";
          value = ns.wireguard.privateKeyFile;
        }
      ]
      ++ imap0 (i: p: {
        field = "wireguard.peers.${toString i}.presharedKeyFile";
        value = p.presharedKeyFile;
      }) ns.wireguard.peers;
    in
    concatMap (
      p:
      optionals (p.value != null) [
        {
          assertion = hasPrefix "/" p.value;
          message = "${opt name}.${p.field} = \"${p.value}\" is relative; use an absolute runtime path such as /run/secrets/${name}.conf.";
        }
        {
          assertion = !(hasPrefix storePrefix p.value);
          message = "${opt name}.${p.field} points into the world-readable Nix store (${p.value}); keep secrets outside it (e.g. /run/secrets/..., managed by sops-nix/agenix) and pass the path as a string, not a Nix path literal.";
        }
      ]
    ) paths;

  namespaceAssertions =
    name: ns:
    let
      iface = wgIfOf name ns;
    in
    [
      {
        assertion = builtins.stringLength name <= maxNameLen;
        message = "${opt name}: the name is ${toString (builtins.stringLength name)} characters long; use at most ${toString maxNameLen} (derived interface names such as vc-${name} must fit in 15 bytes), e.g. \"${lib.substring 0 maxNameLen name}\".";
      }
      {
        assertion = builtins.match nameRegex name != null || builtins.stringLength name > maxNameLen;
        message = "${opt name}: the name must match ^${nameRegex}$ (start with a lowercase letter; then a-z, 0-9 or '-'), because it becomes /run/netns/<name> and interface names; rename the namespace.";
      }
      {
        assertion = ns.interface == null || builtins.match ifnameRegex ns.interface != null;
        message = "${opt name}.interface = \"${toString ns.interface}\" is not a valid interface name; use 1-15 characters of A-Z a-z 0-9 _ . - (or null for \"vc-${name}\").";
      }
      {
        assertion = ns.wireguard.configFile != null || ns.wireguard.privateKeyFile != null;
        message = "${opt name}: no tunnel configured; set wireguard.configFile (a wg-quick file from your provider) or wireguard.privateKeyFile together with wireguard.addresses and wireguard.peers.";
      }
      {
        assertion = !ns.hostLink.enable || (ns.hostLink.hostAddress != null && ns.hostLink.namespaceAddress != null);
        message = "${opt name}.hostLink: set hostAddress and namespaceAddress (one free private subnet, e.g. \"10.200.1.1/30\" and \"10.200.1.2/30\").";
      }
      {
        assertion = ns.hostLink.enable || (ns.hostLink.portMappings == [ ] && ns.hostLink.accessibleFrom == [ ]);
        message = "${opt name}.hostLink: portMappings/accessibleFrom are set but hostLink.enable is false; enable the host link or remove them.";
      }
      {
        assertion = ns.wireguard.mtu == null || ns.wireguard.mtu >= 1280 || ns.ipv6 == "block";
        message = "${opt name}.wireguard.mtu = ${toString ns.wireguard.mtu} is below the IPv6 minimum (1280); set ipv6 = \"block\" or raise the MTU.";
      }
      {
        assertion = iface != nsVeth name;
        message = "${opt name}.interface = \"${iface}\" collides with the host-link veth name; pick another.";
      }
    ]
    ++ secretAssertions name ns;

  nsList = mapAttrsToList (name: ns: { inherit name ns; }) cfg.namespaces;

  # Every pair of distinct namespaces, once.
  pairs = concatLists (
    imap0 (i: a: map (b: { inherit a b; }) (lib.drop (i + 1) nsList)) nsList
  );

  hostLinkPrefixes =
    e:
    if e.ns.hostLink.enable then
      filter (p: p != null) (
        map parseCidr4 [
          e.ns.hostLink.hostAddress
          e.ns.hostLink.namespaceAddress
        ]
      )
    else
      [ ];

  subnetAssertions = map (
    { a, b }:
    let
      clashes = filter (x: overlaps4 x.pa x.pb) (
        concatMap (pa: map (pb: { inherit pa pb; }) (hostLinkPrefixes b)) (hostLinkPrefixes a)
      );
      c = builtins.head clashes;
    in
    {
      assertion = clashes == [ ];
      message = "services.vpnConfinement: the host-link subnets of namespaces \"${a.name}\" (${c.pa.text}) and \"${b.name}\" (${c.pb.text}) overlap; give each namespace its own subnet, e.g. 10.200.N.1/30 and 10.200.N.2/30 with a different N per namespace.";
    }
  ) pairs;

  # Host-side UDP/TCP ports: port mappings and the tunnels' listen ports all
  # live in the host's network namespace.
  hostPortClaims = concatMap (
    { name, ns }:
    (concatLists (
      imap0 (
        i: m:
        map (proto: {
          key = "${proto}/${toString m.from}";
          owner = "${opt name}.hostLink.portMappings.${toString i}";
        }) (if m.protocol == "both" then [ "tcp" "udp" ] else [ m.protocol ])
      ) (if ns.hostLink.enable then ns.hostLink.portMappings else [ ])
    ))
    ++ optional (ns.wireguard.listenPort != null && ns.wireguard.listenPort != 0) {
      key = "udp/${toString ns.wireguard.listenPort}";
      owner = "${opt name}.wireguard.listenPort";
    }
  ) nsList;
  portConflicts = filterAttrs (_: claims: length claims > 1) (
    lib.groupBy (c: c.key) hostPortClaims
  );

  ifaceClaims = lib.groupBy (e: wgIfOf e.name e.ns) nsList;
  ifaceConflicts = filterAttrs (_: es: length es > 1) ifaceClaims;

  serviceAssertions = lib.flatten (
    mapAttrsToList (
      svc: s:
      let
        vc = s.vpnConfinement;
        ns = effectiveNs vc;
        where = "systemd.services.${builtins.toJSON svc}.vpnConfinement";
      in
      [
        {
          assertion = ns != null;
          message = "${where}.namespace is not set and there is not exactly one namespace to default to (defined: ${
            if namespaceNames == [ ] then "none" else concatStringsSep ", " namespaceNames
          }); set it to one of services.vpnConfinement.namespaces.";
        }
        {
          assertion = ns == null || cfg.namespaces ? ${ns};
          message = "${where}.namespace = \"${toString ns}\" is not defined; define services.vpnConfinement.namespaces.${toString ns} or use one of: ${
            if namespaceNames == [ ] then "(none defined)" else concatStringsSep ", " namespaceNames
          }.";
        }
      ]
    ) confinedServices
  );
in
{
  options.services.vpnConfinement = {
    enable = mkEnableOption "VPN confinement: services in network namespaces whose only way out is a WireGuard tunnel";

    package = mkPackageOption pkgs "vpn-agent" { };

    checkConfig = mkOption {
      type = types.bool;
      default = true;
      description = ''
        Run `vpn-agent validate --static` on each generated config at build
        time, so that a config the agent would reject fails the build. Secrets
        are not read. Skipped automatically when cross-compiling.
      '';
    };

    namespaces = mkOption {
      type = types.attrsOf (types.submodule namespaceModule);
      default = { };
      example = literalExpression ''
        {
          proton = {
            wireguard.configFile = "/run/secrets/proton.conf";
            openPorts = [ { port = 51413; protocol = "both"; } ];
            hostLink = {
              enable = true;
              hostAddress = "10.200.1.1/30";
              namespaceAddress = "10.200.1.2/30";
              accessibleFrom = [ "192.168.1.0/24" ];
              portMappings = [ { from = 9091; to = 9091; } ];
            };
          };
        }
      '';
      description = ''
        Confinement namespaces. The attribute name is the namespace name
        (`/run/netns/<name>`, at most 12 characters of a-z, 0-9 and '-',
        starting with a letter); each gets a `vpn-agent-<name>` service.
      '';
    };
  };

  # Per-service attachment: systemd.services.<svc>.vpnConfinement.
  options.systemd.services = mkOption {
    type = types.attrsOf (
      types.submodule (
        { config, ... }:
        let
          vc = config.vpnConfinement;
          nsName = effectiveNs vc;
          ns = cfg.namespaces.${nsName} or null;
          agent = "${agentUnit nsName}.service";
        in
        {
          options.vpnConfinement = {
            enable = mkEnableOption ''
              running this service inside a VPN confinement namespace: its only
              network is the namespace's loopback, WireGuard interface (and the
              host-link veth when enabled), and names resolve only through the
              tunnel's resolvers
            '';
            namespace = mkOption {
              type = types.nullOr types.str;
              default = null;
              example = "proton";
              description = ''
                Name of a namespace in `services.vpnConfinement.namespaces`.
                `null` selects the only namespace when exactly one is defined.
              '';
            };
            bypassResolverIsolation = mkOption {
              type = types.bool;
              default = false;
              description = ''
                Do not hide /run/nscd, /run/systemd/resolve and the D-Bus system
                bus from the service. Those daemons resolve names on the host,
                outside the tunnel, so this permits DNS leaks; a warning is
                emitted. Only for services that need the system bus and do
                their own DNS.
              '';
            };
          };

          config = mkIf (cfg.enable && vc.enable && nsName != null) {
            # Started after the namespace is ready (Type=notify); stopped, or
            # restarted, with it.
            bindsTo = [ agent ];
            after = [ agent ];
            # `systemctl restart` of the agent restarts the service with it.
            partOf = [ agent ];
            # BindsTo= stops the service when the agent fails; the agent
            # upholding it starts it again once the agent's automatic
            # restart brought the namespace back (PartOf= covers only
            # explicit restarts). Declared here, as the agent's Upholds=.
            upheldBy = [ agent ];
            serviceConfig = {
              NetworkNamespacePath = netnsPath nsName;
              BindReadOnlyPaths = [
                "/etc/netns/${nsName}/resolv.conf:/etc/resolv.conf"
                "/etc/netns/${nsName}/nsswitch.conf:/etc/nsswitch.conf"
              ];
              InaccessiblePaths = mkIf (!vc.bypassResolverIsolation) resolverIpcPaths;
              RestrictNetworkInterfaces = [
                "lo"
                (wgIfOf nsName ns)
              ]
              ++ optional (ns != null && ns.hostLink.enable) (nsVeth nsName);
            };
          };
        }
      )
    );
  };

  config = mkMerge [
  {
    # Outside `mkIf cfg.enable`: a service asking for confinement while the
    # module is off would otherwise run unconfined, silently.
    assertions = mapAttrsToList (svc: _: {
      assertion = cfg.enable;
      message = "systemd.services.${builtins.toJSON svc}.vpnConfinement.enable is set but services.vpnConfinement.enable is false, so the service would run UNCONFINED; set services.vpnConfinement.enable = true.";
    }) confinedServices;
  }
  (mkIf cfg.enable {
    assertions = [
      {
        # The agent writes /etc/netns/<name>/{resolv,nsswitch}.conf.
        assertion =
          !((config.system.etc.overlay.enable or false) && !(config.system.etc.overlay.mutable or true));
        message = "services.vpnConfinement: the agent writes /etc/netns/<name>/, but system.etc.overlay.mutable = false makes /etc read-only; set system.etc.overlay.mutable = true or disable the /etc overlay.";
      }
    ]
    ++ concatLists (mapAttrsToList namespaceAssertions cfg.namespaces)
      ++ subnetAssertions
      ++ mapAttrsToList (key: claims: {
        assertion = false;
        message = "services.vpnConfinement: host port ${key} is claimed more than once (${
          concatMapStringsSep ", " (c: c.owner) claims
        }); every host port may be mapped (or used as a WireGuard listenPort) once.";
      }) portConflicts
      ++ mapAttrsToList (iface: es: {
        assertion = false;
        message = "services.vpnConfinement: namespaces ${
          concatMapStringsSep ", " (e: "\"${e.name}\"") es
        } all use the WireGuard interface name \"${iface}\"; set distinct `interface` names (or leave them null).";
      }) ifaceConflicts
      ++ serviceAssertions;

    warnings =
      mapAttrsToList (
        svc: _:
        "systemd.services.${builtins.toJSON svc}.vpnConfinement.bypassResolverIsolation is set: the service can reach nscd, systemd-resolved and the D-Bus system bus, which resolve names outside the tunnel (DNS leak)."
      ) (filterAttrs (_: s: s.vpnConfinement.bypassResolverIsolation) confinedServices)
      ++ mapAttrsToList (
        svc: _:
        "systemd.services.${builtins.toJSON svc} is VPN-confined but systemd.sockets.${builtins.toJSON svc} exists: socket-activated listeners are created in the host's network namespace unless that socket unit sets NetworkNamespacePath too."
      ) (
        filterAttrs (
          svc: _:
          (config.systemd.sockets ? ${svc})
          && (config.systemd.sockets.${svc}.socketConfig.NetworkNamespacePath or null) == null
        ) confinedServices
      );

    environment.systemPackages = [ cfg.package ];

    # The kernel backend needs the module; `auto` falls back to userspace on
    # its own (and the kernel autoloads the module on link creation anyway).
    boot.kernelModules = mkIf (any (e: e.ns.backend == "kernel") nsList) [ "wireguard" ];

    # DNAT'ed port mappings are forwarded from the uplink to the veth.
    boot.kernel.sysctl."net.ipv4.ip_forward" = mkIf (any (
      e: e.ns.hostLink.enable && e.ns.hostLink.portMappings != [ ]
    ) nsList) (mkDefault 1);

    systemd.services = mapAttrs' (
      name: ns:
      nameValuePair (agentUnit name) {
        description = "VPN confinement namespace ${name} (WireGuard tunnel and kill switch)";
        wantedBy = [ "multi-user.target" ];
        wants = [ "network-online.target" ];
        # After the host firewall so that its start (which may flush the
        # ruleset) does not remove the host-link table (inet vpnc-<name>).
        after = [
          "network-online.target"
          "nftables.service"
          "firewall.service"
        ];
        before = map (s: "${s}.service") (servicesOf name);
        unitConfig = {
          StartLimitIntervalSec = 120;
          StartLimitBurst = 10;
        };
        serviceConfig = {
          Type = "notify";
          NotifyAccess = "main";
          ExecStart = "${cfg.package}/bin/vpn-agent run --config ${configFiles.${name}}";
          Restart = "on-failure";
          RestartSec = "5s";
          TimeoutStartSec = "90s";
          TimeoutStopSec = "30s";
          # The agent sends WATCHDOG=1 only while the namespace, tunnel and
          # kill switch are healthy; if its own repairs fail for this long,
          # systemd restarts it (a stale handshake is not "unhealthy").
          WatchdogSec = "30s";

          # NO PRIVATE MOUNT NAMESPACE. The agent bind-mounts /run/netns/<name>
          # and writes /etc/netns/<name>/{resolv,nsswitch}.conf, and other
          # units (NetworkNamespacePath=, BindReadOnlyPaths=) must see both.
          # A mount made inside a private mount namespace does not propagate
          # back to the host, so every option that makes systemd unshare a
          # mount namespace is off: ProtectSystem, ProtectHome, PrivateTmp,
          # PrivateDevices, PrivateMounts, ProtectKernelTunables/Modules/Logs,
          # ProtectControlGroups, ProtectProc, ProtectHostname,
          # ReadWritePaths/ReadOnlyPaths/InaccessiblePaths, BindPaths,
          # TemporaryFileSystem, RootDirectory. (Kernel tunables must stay
          # writable anyway: the agent sets per-namespace net sysctls.)
          # Set explicitly so a merged default cannot sneak one in.
          PrivateTmp = false;
          PrivateMounts = false;
          ProtectSystem = false;
          ProtectHome = false;

          # What needs no mount namespace:
          # CAP_NET_ADMIN: links, addresses, routes, nftables, WireGuard.
          # CAP_SYS_ADMIN: setns(2)/unshare(2) and the /run/netns bind mount.
          # CAP_NET_RAW: raw/packet sockets for health probes.
          # CAP_DAC_READ_SEARCH: read 0600 secrets owned by other users.
          CapabilityBoundingSet = [
            "CAP_NET_ADMIN"
            "CAP_SYS_ADMIN"
            "CAP_NET_RAW"
            "CAP_DAC_READ_SEARCH"
          ];
          NoNewPrivileges = true;
          RestrictAddressFamilies = [
            "AF_UNIX"
            "AF_NETLINK"
            "AF_INET"
            "AF_INET6"
          ];
          # Only network namespaces may be created or joined.
          RestrictNamespaces = "net";
          # The userspace backend opens /dev/net/tun; nothing else.
          DevicePolicy = "closed";
          DeviceAllow = [ "/dev/net/tun rw" ];
          LockPersonality = true;
          MemoryDenyWriteExecute = true;
          RestrictRealtime = true;
          RestrictSUIDSGID = true;
          ProtectClock = true;
          KeyringMode = "private";
          SystemCallArchitectures = "native";
          # @mount for the netns bind mount; setns/unshare are in @system-service.
          SystemCallFilter = [
            "@system-service"
            "@mount"
            "~@cpu-emulation @debug @obsolete @raw-io @reboot @swap @module"
          ];
          SystemCallErrorNumber = "EPERM";
          # resolv.conf/nsswitch.conf must stay world-readable for confined
          # services running as other users.
          UMask = "0022";
        };
      }
    ) cfg.namespaces;
  })
  ];
}
