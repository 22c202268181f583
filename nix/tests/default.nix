# The VM tests run by `nix flake check` (checks.<system>.<name>).
{ pkgs }:
let
  common = import ./common.nix { inherit pkgs; };
  # Each test file is a function of pkgs, common and the topology's
  # addresses (common.net), which every test uses.
  test =
    file:
    import file {
      inherit pkgs common;
      inherit (common) net;
    };
in
{
  basic = test ./basic.nix;
  killswitch = test ./killswitch.nix;
  dns = test ./dns.nix;
  ipv6-mtu = test ./ipv6-mtu.nix;
  privacy = test ./privacy.nix;
  portmap = test ./portmap.nix;
  userspace = test ./userspace.nix;
  containers = test ./containers.nix;
}
