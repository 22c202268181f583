# Shared pieces of the NixOS VM tests.
#
# Topology: one virtual LAN (vlan 1) plays the host's uplink.
#
#   provider 192.168.1.10  WireGuard server wg0 10.100.0.1/24 + fd00:100::1/64,
#                          udp/51820; "the Internet behind the VPN": target
#                          203.0.113.1 + 2001:db8:ff::1 on lo (HTTP echo :80,
#                          iperf3 :5201); resolvers:
#                            10.100.0.1:53   tunnel resolver (target.vpn.test -> 203.0.113.1)
#                            192.168.1.10:53 uplink resolver (*.vpn.test -> 198.51.100.66,
#                                            the "leaked" answer)
#                          a BitTorrent tracker on 10.100.0.1:6969 (privacy test)
#   host     192.168.1.20  our module; namespace "vpn", tunnel address 10.100.0.2
#                          (fd00:100::2); nameserver = the uplink resolver; a
#                          direct route to 203.0.113.0/24 via the provider, so
#                          an unconfined process reaches the target *without*
#                          the tunnel (the echo server tells the two apart)
#   client   192.168.1.30  LAN client allowed to use the port mapping (portmap)
#   outsider 192.168.1.40  LAN machine that is not (portmap)
#
# The keys below are throwaway keys generated for these tests only.
{ pkgs }:

let
  inherit (pkgs) lib;
in
rec {
  net = {
    provider = "192.168.1.10";
    host = "192.168.1.20";
    client = "192.168.1.30";
    outsider = "192.168.1.40";
    tunProvider = "10.100.0.1";
    tunHost = "10.100.0.2";
    tunProvider6 = "fd00:100::1";
    tunHost6 = "fd00:100::2";
    target = "203.0.113.1";
    target6 = "2001:db8:ff::1";
    leakAnswer = "198.51.100.66";
    wgPort = 51820;
  };

  keys = {
    provider = {
      private = "qC0bcNchc1lrq6Wz4AJq/RuAOPlAj5+5sht/bVxpKXs=";
      public = "CJKHNfcgGE7vrycDdM8Ac68BF7V4qmnmKlEDGmQ29hM=";
    };
    host = {
      private = "WMCaLlOg6q6Tc7qljbfXHQifp8mXvTkXUcfm1pV6GU8=";
      public = "DuF99Nu1xDuiHrhz3peGGX98ufcmDAqNT5CeyQO1PjA=";
    };
  };

  # Static uplink address on eth1 (replaces the test framework's numbering,
  # which depends on node names).
  uplink =
    {
      address,
      mtu ? null,
    }:
    { lib, ... }:
    {
      virtualisation.vlans = [ 1 ];
      networking.useDHCP = false;
      networking.interfaces.eth1 = {
        ipv4.addresses = lib.mkForce [
          {
            inherit address;
            prefixLength = 24;
          }
        ];
      }
      // lib.optionalAttrs (mtu != null) { inherit mtu; };
    };

  # The base of the provider's HTTP servers below: a 200 reply with a body,
  # and each request logged with the client's address.
  pyHandler = ''
    import http.server
    import sys


    class Handler(http.server.BaseHTTPRequestHandler):
        def reply(self, content_type, body):
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt, *args):
            sys.stderr.write("%s %s\n" % (self.client_address[0], fmt % args))
            sys.stderr.flush()
  '';

  echoServer = pkgs.writeText "echo-server.py" ''
    # GET /      -> "client=<source address>"
    # GET /blob  -> the bytes of /srv/www/blob
    import socket
    import socketserver
    ${pyHandler}

    class Echo(Handler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            client = self.client_address[0]
            if client.startswith("::ffff:"):
                client = client[len("::ffff:"):]
            if self.path == "/blob":
                with open("/srv/www/blob", "rb") as f:
                    body = f.read()
            else:
                body = ("client=%s\n" % client).encode()
            self.reply("application/octet-stream", body)


    class Server(http.server.ThreadingHTTPServer):
        address_family = socket.AF_INET6

        def server_bind(self):
            # Dual stack, and no reverse lookup of "::" (HTTPServer's default).
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            socketserver.TCPServer.server_bind(self)
            self.server_name = "target"
            self.server_port = self.server_address[1]


    Server(("::", 80), Echo).serve_forever()
  '';

  # A minimal HTTP tracker: remembers who announced (source address as seen
  # by the tracker, announced port) per info_hash and hands out the others.
  tracker = pkgs.writeText "tracker.py" ''
    import socket
    import struct
    import urllib.parse
    ${pyHandler}

    swarms: dict[bytes, set[tuple[str, int]]] = {}


    class Tracker(Handler):
        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            if url.path != "/announce":
                self.send_error(404)
                return
            q = urllib.parse.parse_qs(url.query, keep_blank_values=True, encoding="latin-1")
            info_hash = q["info_hash"][0].encode("latin-1")
            port = int(q["port"][0])
            event = q.get("event", [""])[0]
            ip = self.client_address[0]
            swarm = swarms.setdefault(info_hash, set())
            if event == "stopped":
                swarm.discard((ip, port))
            else:
                swarm.add((ip, port))
            print("announce from %s port %d event %s" % (ip, port, event or "-"), flush=True)
            peers = b"".join(
                socket.inet_aton(a) + struct.pack("!H", p)
                for (a, p) in sorted(swarm)
                if (a, p) != (ip, port)
            )
            body = b"d8:intervali5e5:peers" + str(len(peers)).encode() + b":" + peers + b"e"
            self.reply("text/plain", body)


    http.server.ThreadingHTTPServer(("0.0.0.0", 6969), Tracker).serve_forever()
  '';

  # A resolver on the provider: dnsmasq on `listen` answering only
  # `records` (--address=/name/ip), started at boot; the caller adds what
  # it must wait for.
  dnsmasqService =
    {
      listen,
      records,
    }:
    {
      wantedBy = [ "multi-user.target" ];
      serviceConfig = {
        ExecStart = lib.concatStringsSep " " (
          [
            "${pkgs.dnsmasq}/bin/dnsmasq"
            "--keep-in-foreground"
            "--conf-file=/dev/null"
            "--no-resolv"
            "--no-hosts"
            "--bind-dynamic"
            "--listen-address=${listen}"
            "--user=nobody"
            "--group=nogroup"
            "--pid-file=/run/dnsmasq-${listen}.pid"
            "--log-queries"
            "--log-facility=-"
          ]
          ++ map (r: "--address=${r}") records
        );
        Restart = "on-failure";
        RestartSec = 1;
      };
    };

  # The provider node. wgMtu/uplinkMtu: null = defaults (1420/1500).
  provider =
    {
      wgMtu ? null,
      uplinkMtu ? null,
    }:
    { pkgs, ... }:
    {
      imports = [
        (uplink {
          address = net.provider;
          mtu = uplinkMtu;
        })
      ];
      networking.firewall.enable = false;
      networking.interfaces.lo.ipv4.addresses = [
        {
          address = net.target;
          prefixLength = 32;
        }
      ];
      networking.interfaces.lo.ipv6.addresses = [
        {
          address = net.target6;
          prefixLength = 128;
        }
      ];
      networking.hosts.${net.tunProvider} = [ "tracker.vpn.test" ];

      environment.etc."wg-test/provider.key" = {
        text = keys.provider.private + "\n";
        mode = "0600";
      };
      networking.wireguard.interfaces.wg0 = {
        ips = [
          "${net.tunProvider}/24"
          "${net.tunProvider6}/64"
        ];
        listenPort = net.wgPort;
        privateKeyFile = "/etc/wg-test/provider.key";
        mtu = wgMtu;
        peers = [
          {
            publicKey = keys.host.public;
            allowedIPs = [
              "${net.tunHost}/32"
              "${net.tunHost6}/128"
            ];
          }
        ];
      };

      systemd.services.make-blob = {
        wantedBy = [ "multi-user.target" ];
        serviceConfig = {
          Type = "oneshot";
          RemainAfterExit = true;
        };
        script = ''
          mkdir -p /srv/www
          head -c 262144 /dev/urandom > /srv/www/blob
        '';
      };
      systemd.services.echo-http = {
        wantedBy = [ "multi-user.target" ];
        requires = [ "make-blob.service" ];
        after = [ "make-blob.service" ];
        serviceConfig = {
          ExecStart = "${pkgs.python3}/bin/python3 ${echoServer}";
          Restart = "on-failure";
        };
      };
      services.iperf3.enable = true;

      systemd.services.dns-tunnel =
        dnsmasqService {
          listen = net.tunProvider;
          records = [
            "/target.vpn.test/${net.target}"
            "/target.vpn.test/${net.target6}"
            "/tracker.vpn.test/${net.tunProvider}"
          ];
        }
        // {
          requires = [ "wireguard-wg0.service" ];
          after = [ "wireguard-wg0.service" ];
        };
      systemd.services.dns-uplink =
        dnsmasqService {
          listen = net.provider;
          records = [ "/vpn.test/${net.leakAnswer}" ];
        }
        // {
          wants = [ "network-online.target" ];
          after = [ "network-online.target" ];
        };

      systemd.services.tracker = {
        wantedBy = [ "multi-user.target" ];
        serviceConfig = {
          ExecStart = "${pkgs.python3}/bin/python3 ${tracker}";
          Restart = "on-failure";
        };
      };

      environment.systemPackages = with pkgs; [
        nftables
        tcpdump
        wireguard-tools
      ];
    };

  # Run by probe@<what>.service (confined) and plainprobe@<what>.service
  # (not confined); the output lands in /run/probe-out/<what>. A non-zero
  # exit fails `systemctl start`.
  probeScript = pkgs.writeShellScript "probe" ''
    set -euo pipefail
    what=$1
    out=/run/probe-out/$what
    rm -f "$out" "$out.tmp"
    curl="${pkgs.curl}/bin/curl -sS --fail"
    case "$what" in
      http)       $curl -4 --max-time 10 http://${net.target}/ ;;
      http-name)  $curl -4 --max-time 10 http://target.vpn.test/ ;;
      uplink)     $curl -4 --max-time 10 http://${net.provider}/ ;;
      v6)         $curl -6 --max-time 90 -g 'http://[${net.target6}]/blob' | ${pkgs.coreutils}/bin/sha256sum ;;
      dns)        ${pkgs.getent}/bin/getent ahostsv4 target.vpn.test ;;
      dns6)       ${pkgs.getent}/bin/getent ahostsv6 target.vpn.test ;;
      dns-direct) ${pkgs.dnsutils}/bin/dig +time=3 +tries=1 @${net.provider} target.vpn.test A ;;
      iperf)      ${pkgs.iperf3}/bin/iperf3 -c ${net.target} -t 3 --connect-timeout 5000 ;;
      lan)        $curl -4 --max-time 5 http://${net.client}/ ;;
      *)          echo "unknown probe $what" >&2; exit 2 ;;
    esac > "$out.tmp"
    mv "$out.tmp" "$out"
  '';

  probeUnit = confined: {
    description = "test probe %i${lib.optionalString confined " (VPN-confined)"}";
    vpnConfinement = lib.mkIf confined {
      enable = true;
      namespace = "vpn";
    };
    unitConfig.StartLimitIntervalSec = 0;
    serviceConfig = {
      Type = "oneshot";
      DynamicUser = true;
      ReadWritePaths = [ "/run/probe-out" ];
      ExecStart = "${probeScript} %i";
      TimeoutStartSec = "150s";
    };
  };

  # The host node: our module with namespace "vpn" (kernel/auto backend,
  # structured options; tests override what they exercise).
  host =
    {
      uplinkMtu ? null,
    }:
    { lib, pkgs, ... }:
    {
      imports = [
        ../module.nix
        (uplink {
          address = net.host;
          mtu = uplinkMtu;
        })
      ];
      networking.interfaces.eth1.ipv4.routes = [
        {
          address = "203.0.113.0";
          prefixLength = 24;
          via = net.provider;
        }
      ];
      # The host's own resolver is the *uplink* one: any confined lookup
      # that reaches it (directly or through nscd) gets the leak answer.
      networking.nameservers = [ net.provider ];
      # Nothing else on the host may talk on the uplink during captures.
      services.timesyncd.enable = lib.mkForce false;

      environment.etc."vpn-test/host.key" = {
        text = keys.host.private + "\n";
        mode = "0600";
      };

      services.vpnConfinement = {
        enable = true;
        namespaces.vpn = {
          wireguard = {
            privateKeyFile = lib.mkDefault "/etc/vpn-test/host.key";
            addresses = lib.mkDefault [ "${net.tunHost}/32" ];
            peers = lib.mkDefault [
              {
                publicKey = keys.provider.public;
                endpoint = "${net.provider}:${toString net.wgPort}";
                persistentKeepalive = 5;
              }
            ];
          };
          dns.servers = lib.mkDefault [ net.tunProvider ];
        };
      };

      systemd.tmpfiles.rules = [ "d /run/probe-out 1777 root root -" ];
      systemd.services."probe@" = probeUnit true;
      systemd.services."plainprobe@" = probeUnit false;

      # A long-running confined service (BindsTo semantics).
      systemd.services.confined-sleep = confined "${pkgs.coreutils}/bin/sleep infinity";

      environment.systemPackages = with pkgs; [
        curl
        dnsutils
        iproute2
        jq
        nftables
        tcpdump
        wireguard-tools
      ];
    };

  # A confined service of namespace "vpn" that runs ExecStart as a dynamic
  # user, started at boot.
  confined = execStart: {
    wantedBy = [ "multi-user.target" ];
    vpnConfinement = {
      enable = true;
      namespace = "vpn";
    };
    serviceConfig = {
      DynamicUser = true;
      ExecStart = execStart;
    };
  };

  # The topology every test uses: `provider` and `host` (namespace "vpn"),
  # with hostArgs/providerArgs for their functions above, hostConfig and
  # providerConfig as modules on top, and any further `nodes`. The script
  # runs once the provider's services are up and the host's agent is ready.
  mkTest =
    {
      name,
      hostArgs ? { },
      hostConfig ? { },
      providerArgs ? { },
      providerConfig ? { },
      nodes ? { },
      script,
    }:
    pkgs.testers.runNixOSTest {
      name = "vpn-confinement-${name}";
      nodes = nodes // {
        provider.imports = [
          (provider providerArgs)
          providerConfig
        ];
        host.imports = [
          (host hostArgs)
          hostConfig
        ];
      };
      testScript = ''
        ${pyHelpers}

        start_all()
        wait_provider(provider)
        host.wait_for_unit("vpn-agent-vpn.service")

      ''
      + script;
    };

  # Python helpers prepended to every testScript.
  pyHelpers = ''
    import shlex


    def start_capture(machine, iface, name):
        """tcpdump everything on iface into /tmp/<name>.pcap until stop_capture."""
        machine.succeed(
            f"systemd-run --unit=capture-{name} tcpdump -n -U -i {iface} -w /tmp/{name}.pcap"
        )
        machine.wait_until_succeeds(
            f"journalctl -u capture-{name} -o cat | grep -q 'listening on'"
        )


    def stop_capture(machine, name):
        machine.succeed(f"systemctl stop capture-{name}")


    def captured(machine, name, bpf):
        """The packets of a finished capture that match a BPF filter, one per line."""
        return machine.succeed(
            f"tcpdump -n -r /tmp/{name}.pcap {shlex.quote(bpf)} 2>/dev/null"
        ).strip()


    def stop_capture_no_leaks(machine, name):
        """Stop a capture: it must hold WireGuard packets and no leak (LEAK_BPF)."""
        stop_capture(machine, name)
        leaks = captured(machine, name, LEAK_BPF)
        assert leaks == "", f"plaintext from the confined service on the uplink ({name}):\n{leaks}"
        assert captured(machine, name, WG_BPF) != "", f"the capture {name} saw no WireGuard packets"


    def probe(machine, what, unit="probe"):
        machine.succeed(f"systemctl start {unit}@{what}.service")
        return machine.succeed(f"cat /run/probe-out/{what}")


    def wait_probe(machine, what, timeout=180):
        machine.wait_until_succeeds(f"systemctl start probe@{what}.service", timeout=timeout)
        return machine.succeed(f"cat /run/probe-out/{what}")


    def crash_agent(machine):
        """SIGKILL the agent: namespace and kill switch stay; Restart= brings it back."""
        machine.succeed("systemctl kill --signal=SIGKILL vpn-agent-vpn.service")
        machine.succeed("test -e /run/netns/vpn")
        machine.succeed("ip netns exec vpn nft list table inet vpn-confinement >/dev/null")
        machine.wait_until_succeeds("systemctl is-active vpn-agent-vpn.service")


    def wait_provider(provider):
        provider.wait_for_unit("wireguard-wg0.service")
        provider.wait_for_unit("echo-http.service")
        provider.wait_for_unit("dns-tunnel.service")
        provider.wait_for_unit("dns-uplink.service")
        provider.wait_for_open_port(80)


    # Leak signatures on the host's uplink: anything to or from the target,
    # the tunnel's inner addresses, or DNS.
    LEAK_BPF = "host ${net.target} or net 10.100.0.0/24 or port 53 or tcp port 80"
    WG_BPF = "udp port ${toString net.wgPort}"
  '';
}
