package provider

import "testing"

func TestUAPIConfig(t *testing.T) {
	const key = "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk="
	s, err := uapiConfig(&WireGuard{PrivateKey: key, ListenPort: 51820, Peers: []Peer{{
		PublicKey: key, Endpoint: "198.18.2.2:51820", AllowedIPs: []string{"0.0.0.0/0", "fd66::2/128"}, PersistentKeepalive: 25,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	want := "private_key=c809f3e5317e9575c9b5ed78b638b7ce530dabe85ddab614220241801ddf0669\nlisten_port=51820\nreplace_peers=true\n" +
		"public_key=c809f3e5317e9575c9b5ed78b638b7ce530dabe85ddab614220241801ddf0669\nendpoint=198.18.2.2:51820\n" +
		"persistent_keepalive_interval=25\nreplace_allowed_ips=true\nallowed_ip=0.0.0.0/0\nallowed_ip=fd66::2/128\n"
	if s != want {
		t.Errorf("uapiConfig =\n%s\nwant\n%s", s, want)
	}
	if _, err := uapiConfig(&WireGuard{PrivateKey: "nope"}); err == nil {
		t.Error("bad key accepted")
	}
}
