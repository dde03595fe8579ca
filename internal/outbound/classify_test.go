package outbound

import (
	"net/netip"
	"testing"
)

func TestClassify(t *testing.T) {
	for _, c := range []struct{ addr, class string }{
		// IPv4
		{"0.0.0.0", ClassUnspecified},
		{"0.1.2.3", ClassUnspecified},
		{"10.0.0.1", ClassPrivate},
		{"10.255.255.255", ClassPrivate},
		{"100.64.0.1", ClassShared},
		{"100.127.255.254", ClassShared},
		{"100.63.255.255", ""},
		{"100.128.0.0", ""},
		{"127.0.0.1", ClassLoopback},
		{"127.255.0.9", ClassLoopback},
		{"169.254.169.254", ClassLinkLocal}, // cloud metadata
		{"169.254.0.1", ClassLinkLocal},
		{"172.16.0.1", ClassPrivate},
		{"172.31.255.255", ClassPrivate},
		{"172.15.255.255", ""},
		{"172.32.0.0", ""},
		{"192.0.0.170", ClassReserved},
		{"192.0.2.1", ClassDocumentation},
		{"192.168.1.1", ClassPrivate},
		{"198.18.0.1", ClassBenchmarking},
		{"198.51.100.7", ClassDocumentation},
		{"203.0.113.9", ClassDocumentation},
		{"224.0.0.1", ClassMulticast},
		{"239.255.255.250", ClassMulticast},
		{"240.0.0.1", ClassReserved},
		{"255.255.255.255", ClassBroadcast},
		{"1.1.1.1", ""},
		{"8.8.8.8", ""},
		{"93.184.216.34", ""},
		{"192.169.0.1", ""},
		// IPv6
		{"::", ClassUnspecified},
		{"::1", ClassLoopback},
		{"::127.0.0.1", ClassReserved}, // IPv4-compatible
		{"fc00::1", ClassPrivate},
		{"fd12:3456:789a::1", ClassPrivate},
		{"fe80::1", ClassLinkLocal},
		{"fe80::1%eth0", ClassLinkLocal},
		{"febf::1", ClassLinkLocal},
		{"fec0::1", ClassPrivate},
		{"ff02::1", ClassMulticast},
		{"2001:db8::1", ClassDocumentation},
		{"100::1", ClassReserved},
		{"64:ff9b:1::1", ClassPrivate},
		{"2001:4860:4860::8888", ""},
		{"2606:4700:4700::1111", ""},
		// IPv4 inside IPv6: classified by the IPv4 address a router translates to.
		{"::ffff:127.0.0.1", ClassLoopback},
		{"::ffff:169.254.169.254", ClassLinkLocal},
		{"::ffff:10.1.2.3", ClassPrivate},
		{"::ffff:100.64.1.1", ClassShared},
		{"::ffff:0.0.0.0", ClassUnspecified},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::7f00:1", ClassLoopback},     // NAT64 of 127.0.0.1
		{"64:ff9b::a9fe:a9fe", ClassLinkLocal}, // NAT64 of 169.254.169.254
		{"64:ff9b::808:808", ""},               // NAT64 of 8.8.8.8
		{"2002:c0a8:101::1", ClassPrivate},     // 6to4 of 192.168.1.1
		{"2002:7f00:1::1", ClassLoopback},      // 6to4 of 127.0.0.1
		{"2002:808:808::1", ""},                // 6to4 of 8.8.8.8
	} {
		if got := Classify(netip.MustParseAddr(c.addr)); got != c.class {
			t.Errorf("Classify(%s) = %q, want %q", c.addr, got, c.class)
		}
	}
	if got := Classify(netip.Addr{}); got != ClassUnspecified {
		t.Errorf("Classify(zero) = %q", got)
	}
}

func TestCheck(t *testing.T) {
	strict := Options{}
	for addr, class := range map[string]string{
		"127.0.0.1:443":              ClassLoopback,
		"[::1]:443":                  ClassLoopback,
		"[::ffff:127.0.0.1]:80":      ClassLoopback,
		"169.254.169.254:80":         ClassLinkLocal,
		"[fe80::1%eth0]:80":          ClassLinkLocal,
		"[fd00::1]:80":               ClassPrivate,
		"100.100.100.200:80":         ClassShared,
		"not an address":             ClassUnspecified,
		"example.com:443":            ClassUnspecified, // never a name: the dialer resolved it
		"8.8.8.8:443":                "",
		"[2606:4700:4700::1111]:443": "",
	} {
		err := strict.Check(addr)
		r, refused := Refused(err)
		switch {
		case class == "" && err != nil:
			t.Errorf("Check(%s) = %v, want allowed", addr, err)
		case class != "" && (!refused || r.Class != class):
			t.Errorf("Check(%s) = %v, want refused as %s", addr, err, class)
		}
	}
	if err := (Options{AllowPrivate: true}).Check("169.254.169.254:80"); err != nil {
		t.Errorf("AllowPrivate: %v", err)
	}
	some := Options{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}}
	if err := some.Check("127.0.0.2:80"); err != nil {
		t.Errorf("an allowed prefix: %v", err)
	}
	if err := some.Check("[::ffff:127.0.0.2]:80"); err != nil {
		t.Errorf("an allowed prefix, IPv4-mapped: %v", err)
	}
	if _, ok := Refused(some.Check("127.0.0.1:80")); !ok {
		t.Error("127.0.0.1 outside the allowed prefix was not refused")
	}
}
