# Issue 22: what people actually run, in the namespace.
#
# * A podman container (virtualisation.oci-containers, image built offline
#   with dockerTools from busybox) confined with vpnConfinement.namespace:
#   it reaches the target through the tunnel, resolves through the tunnel's
#   resolver (the namespace's resolv.conf bound over its own), is refused DNS
#   to any other resolver, and after the agent restarts (a new namespace) it
#   runs again in the new namespace.
# * A socket-activated service (systemd.sockets.<name>.vpnConfinement): the
#   listening socket is created inside the namespace, answers its first
#   connection through the host link, and the activated service is confined.
{ pkgs, common, net }:
let
  image = pkgs.dockerTools.buildImage {
    name = "vpnc-probe";
    tag = "latest";
    copyToRoot = pkgs.buildEnv {
      name = "vpnc-probe-root";
      paths = [ pkgs.busybox ];
      pathsToLink = [ "/bin" ];
    };
    config.Cmd = [
      "/bin/sleep"
      "infinity"
    ];
  };
  # The socket-activated service: one reply per connection (Accept=yes),
  # naming the network namespace it ran in.
  echoScript = pkgs.writeShellScript "sock-echo" ''
    echo "sock-echo netns=$(${pkgs.coreutils}/bin/readlink /proc/self/ns/net)"
  '';
in
common.mkTest {
  name = "containers";

  hostConfig =
    { ... }:
    {
      services.vpnConfinement.namespaces.vpn.hostLink = {
        enable = true;
        hostAddress = "10.200.1.1/30";
        namespaceAddress = "10.200.1.2/30";
        accessibleFrom = [ "${net.client}/32" ];
        portMappings = [
          {
            from = 8080;
            to = 8000;
          }
        ];
      };

      virtualisation.podman.enable = true;
      virtualisation.oci-containers = {
        backend = "podman";
        containers.probe = {
          image = "vpnc-probe:latest";
          imageFile = image;
          vpnConfinement.namespace = "vpn";
        };
      };

      systemd.sockets.sock-echo = {
        wantedBy = [ "sockets.target" ];
        socketConfig = {
          ListenStream = "0.0.0.0:8000";
          Accept = true;
        };
        vpnConfinement.enable = true;
      };
      systemd.services."sock-echo@" = {
        serviceConfig = {
          DynamicUser = true;
          StandardInput = "socket";
          StandardOutput = "socket";
          ExecStart = echoScript;
        };
      };
    };

  nodes.client =
    { pkgs, ... }:
    {
      imports = [ (common.uplink { address = net.client; }) ];
      environment.systemPackages = [ pkgs.netcat ];
    };

  script = ''
    def ns_inode():
        return host.succeed("stat -L -c %i /run/netns/vpn").strip()


    def container_netns():
        pid = host.succeed("podman inspect -f '{{.State.Pid}}' probe").strip()
        return host.succeed(f"stat -L -c %i /proc/{pid}/ns/net").strip()


    def in_container(cmd):
        return host.succeed(f"podman exec probe {cmd}")


    host.wait_for_unit("podman-probe.service")
    client.wait_for_unit("multi-user.target")

    with subtest("the container's unit is bound to the agent and runs in its namespace"):
        unit = host.succeed("systemctl cat podman-probe.service")
        assert "BindsTo=vpn-agent-vpn.service" in unit, unit
        assert "--network=ns:/run/netns/vpn" in unit, unit
        host.wait_until_succeeds("podman inspect -f '{{.State.Running}}' probe | grep -qx true")
        assert container_netns() == ns_inode(), "the container is not in /run/netns/vpn"

    with subtest("the container reaches the target through the tunnel"):
        out = in_container("wget -qO- -T 10 http://${net.target}/")
        assert "client=${net.tunHost}" in out, f"container traffic left outside the tunnel: {out!r}"

    with subtest("it resolves through the tunnel's resolver, with the namespace's resolv.conf"):
        conf = in_container("cat /etc/resolv.conf")
        assert "${net.tunProvider}" in conf, conf
        start_capture(host, "eth1", "ctr-dns")
        out = in_container("nslookup target.vpn.test")
        stop_capture(host, "ctr-dns")
        assert "${net.target}" in out, f"container lookup: {out!r}"
        assert "${net.leakAnswer}" not in out, f"container lookup leaked: {out!r}"
        leaks = captured(host, "ctr-dns", "port 53")
        assert leaks == "", f"DNS on the uplink from the container:\n{leaks}"

    with subtest("DNS to any other resolver is refused"):
        host.fail("podman exec probe nslookup target.vpn.test ${net.provider}")
        provider.fail("journalctl -u dns-uplink.service -o cat | grep -q 'from ${net.tunHost}'")
        # Positive control: the host itself reaches that resolver.
        host.succeed("dig +time=3 +tries=1 @${net.provider} target.vpn.test A | grep -q ${net.leakAnswer}")

    with subtest("after the agent restarts, the container runs again in the new namespace"):
        old = ns_inode()
        host.succeed("systemctl restart vpn-agent-vpn.service")
        host.wait_for_unit("vpn-agent-vpn.service")
        host.wait_until_succeeds("podman inspect -f '{{.State.Running}}' probe | grep -qx true", timeout=120)
        new = ns_inode()
        assert new != old, "the agent's restart did not recreate the namespace"
        host.wait_until_succeeds(f"test \"$(stat -L -c %i /proc/$(podman inspect -f '{{{{.State.Pid}}}}' probe)/ns/net)\" = {new}", timeout=60)
        out = in_container("wget -qO- -T 10 http://${net.target}/")
        assert "client=${net.tunHost}" in out, f"after the restart: {out!r}"

    with subtest("a socket-activated service answers its first connection through the host link"):
        host.wait_for_unit("sock-echo.socket")
        # The listening socket is in the namespace, not on the host.
        host.succeed("ip netns exec vpn ss -Hltn 'sport = :8000' | grep -q 8000")
        host.fail("ss -Hltn 'sport = :8000' | grep -q 8000")
        out = client.succeed("nc -w 5 ${net.host} 8080 </dev/null")
        assert "sock-echo netns=net:[" + ns_inode() + "]" in out, f"socket service: {out!r}"

    with subtest("the socket follows the agent's restart into the new namespace"):
        host.succeed("systemctl restart vpn-agent-vpn.service")
        host.wait_for_unit("vpn-agent-vpn.service")
        host.wait_for_unit("sock-echo.socket")
        client.wait_until_succeeds("nc -w 5 ${net.host} 8080 </dev/null | grep -q 'net:\\['", timeout=60)
        out = client.succeed("nc -w 5 ${net.host} 8080 </dev/null")
        assert "sock-echo netns=net:[" + ns_inode() + "]" in out, f"after the restart: {out!r}"
  '';
}
