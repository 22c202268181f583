# A confined service reaches the target only through the tunnel; an
# unconfined one is unaffected; the namespace holds nothing but lo and the
# tunnel.
{ pkgs, common, net }:
common.mkTest {
  name = "basic";

  script = ''
    with subtest("the namespace's only way out is the tunnel"):
        host.succeed("test -e /run/netns/vpn")
        host.succeed("ip netns list | grep -qw vpn")
        host.fail("ip link show vc-vpn")  # moved out of the host namespace
        # (Kernel fallback tunnels such as sit0 may exist in any new
        # namespace, but they are down.)
        links = host.succeed(
            "ip -n vpn -o link show up | awk -F': ' '{print $2}' | cut -d@ -f1 | sort"
        ).split()
        assert links == ["lo", "vc-vpn"], f"unexpected links up in the namespace: {links}"
        routes = host.succeed("ip -n vpn -4 route show")
        assert "default dev vc-vpn" in routes, routes
        # backend auto picked the kernel implementation
        host.succeed("ip -n vpn -d link show vc-vpn | grep -qw wireguard")
        host.succeed("ip netns exec vpn nft list table inet vpn-confinement >/dev/null")
        host.succeed("test -s /etc/netns/vpn/resolv.conf")
        host.succeed("grep -q 'nameserver ${net.tunProvider}' /etc/netns/vpn/resolv.conf")

    with subtest("a confined service reaches the target through the tunnel, and only so"):
        start_capture(host, "eth1", "basic")
        out = wait_probe(host, "http")
        assert "client=${net.tunHost}" in out, f"target saw {out!r}, not the tunnel address"
        # names resolve through the tunnel's resolver
        out = probe(host, "http-name")
        assert "client=${net.tunHost}" in out, out
        # even the provider's uplink address is reached through the tunnel
        out = probe(host, "uplink")
        assert "client=${net.tunHost}" in out, out
        stop_capture_no_leaks(host, "basic")
        host.succeed(
            "ip netns exec vpn wg show vc-vpn latest-handshakes | awk '{ exit !($2 > 0) }'"
        )

    with subtest("the confined unit carries the five settings"):
        unit = host.succeed("systemctl cat probe@http.service")
        for line in [
            "NetworkNamespacePath=/run/netns/vpn",
            "BindsTo=vpn-agent-vpn.service",
            "After=vpn-agent-vpn.service",
            "BindReadOnlyPaths=/etc/netns/vpn/resolv.conf:/etc/resolv.conf",
            "BindReadOnlyPaths=/etc/netns/vpn/nsswitch.conf:/etc/nsswitch.conf",
            "TemporaryFileSystem=/run/nscd:ro,mode=0755",
        ]:
            assert line in unit, f"{line} missing from probe@.service:\n{unit}"
        # resolved in PID 1's namespace, it would leave the service lo only
        assert "RestrictNetworkInterfaces=" not in unit, unit

    with subtest("an unconfined service is unaffected"):
        out = probe(host, "http", unit="plainprobe")
        assert "client=${net.host}" in out, f"unconfined service saw {out!r}"
        host.succeed("curl -sf --max-time 10 http://${net.target}/ | grep -q 'client=${net.host}'")

    with subtest("bulk transfer through the tunnel"):
        out = probe(host, "iperf")
        assert "receiver" in out, out

    with subtest("the agent unit shares the host's mount namespace"):
        pid = host.succeed("systemctl show -P MainPID vpn-agent-vpn.service").strip()
        host.succeed(f"test $(readlink /proc/{pid}/ns/mnt) = $(readlink /proc/1/ns/mnt)")
  '';
}
