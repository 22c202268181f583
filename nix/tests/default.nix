# The VM tests run by `nix flake check` (checks.<system>.<name>).
{ pkgs }:
let
  common = import ./common.nix { inherit pkgs; };
  test = file: import file { inherit pkgs common; };
in
{
  basic = test ./basic.nix;
  killswitch = test ./killswitch.nix;
  dns = test ./dns.nix;
  ipv6-mtu = test ./ipv6-mtu.nix;
  privacy = test ./privacy.nix;
  portmap = test ./portmap.nix;
  userspace = test ./userspace.nix;
}
