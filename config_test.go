package health

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

func TestConfigDefaults(t *testing.T) {
	var c Config
	c.ApplyDefaults()
	assert.Equal(t, DefaultListen, c.Listen)
	assert.Nil(t, c.Enabled, "ApplyDefaults leaves Enabled nil")
	assert.True(t, c.IsEnabled())

	c = Config{Listen: "0.0.0.0:8080"}
	c.ApplyDefaults()
	assert.Equal(t, "0.0.0.0:8080", c.Listen, "a set field is kept")

	yes, no := true, false
	assert.True(t, (&Config{Enabled: &yes}).IsEnabled())
	assert.False(t, (&Config{Enabled: &no}).IsEnabled())
}

// cNotation is Validate's reason for a host name that inet_aton reads.
const cNotation = "its labels are numbers in C's notation (0x hex, 0 octal), which the C library's resolver " +
	"reads as an IPv4 address and Go's as a name; write the address in dotted decimal"

func TestConfigValidate(t *testing.T) {
	good := []string{
		"127.0.0.1:9101", "127.0.0.1:0", ":9101", "0.0.0.0:0", "[::1]:9101", "[::1]:0", "[::]:65535",
		"[fe80::1%eth0]:9101", "[fe80::1%eth0]:0", "[::ffff:127.0.0.1]:9101", "127.0.0.1:09101",
		"localhost:0", "localhost:9101", "node-1.example:9101", "NODE-1.Example:80", "a:0", "1a:0", "x1.example.9z:0",
		"xn--bcher-kva.example:0", strings.Repeat("a", 63) + ".example:0",
		strings.Repeat(strings.Repeat("a", 62)+".", 4) + "b:0", // 253 bytes
		// Labels that are not all numbers in C's notation, or more of
		// them than inet_aton reads.
		"0xg:0", "0x1g.example:0", "a.0x1:0", "0x1.0x2.0x3.0x4.0x5:0", "deadbeef:0",
		// A zone is an interface's name or index.
		"[fe80::1%25]:0", "[fe80::1%enp0s31f6]:0", "[fe80::1%flannel.1]:0", "[fe80::1%vxlan_calico]:0",
		"[fe80::1%br-0123456789a]:0", "[fe80::1%" + strings.Repeat("a", 15) + "]:0",
	}
	for _, listen := range good {
		t.Run(strconv.Quote(listen), func(t *testing.T) {
			c := Config{Listen: listen}
			assert.NoError(t, c.Validate())
		})
	}
	bad := []struct{ listen, want string }{
		{"", `health: listen is empty: call ApplyDefaults before Validate to get DefaultListen ("127.0.0.1:9101"), or set host:port`},
		{"127.0.0.1", `health: listen "127.0.0.1" is not host:port: missing port in address`},
		{"9101", `health: listen "9101" is not host:port: missing port in address`},
		{"::1:9101", `health: listen "::1:9101" is not host:port: too many colons in address`},
		{"a\nb", `health: listen "a\nb" is not host:port: missing port in address`},
		{"127.0.0.1:", `health: listen "127.0.0.1:": port "" is not a number from 0 to 65535`},
		{"127.0.0.1:65536", `health: listen "127.0.0.1:65536": port "65536" is not a number from 0 to 65535`},
		{"127.0.0.1:-1", `health: listen "127.0.0.1:-1": port "-1" is not a number from 0 to 65535`},
		{"127.0.0.1:+80", `health: listen "127.0.0.1:+80": port "+80" is not a number from 0 to 65535`},
		{"127.0.0.1:http", `health: listen "127.0.0.1:http": port "http" is not a number from 0 to 65535`},
		{"bad host:9101", `health: listen "bad host:9101": host "bad host" holds a space or a byte outside printable ASCII`},
		{"a/b:9101", `health: listen "a/b:9101": host "a/b" is neither an IP address nor a host name: label "a/b" holds '/', which is not a letter, digit or hyphen`},
		// Only an IPv6 address goes in brackets, and never nothing: "[]"
		// would bind every interface.
		{"[]:0", `health: listen "[]:0": empty brackets; to listen on every interface, write ":0"`},
		{"[]:9101", `health: listen "[]:9101": empty brackets; to listen on every interface, write ":9101"`},
		{"[localhost]:0", `health: listen "[localhost]:0": host "localhost" in brackets is not an IPv6 address`},
		{"[127.0.0.1]:0", `health: listen "[127.0.0.1]:0": host "127.0.0.1" in brackets is not an IPv6 address`},
		{"[fe80::zz]:0", `health: listen "[fe80::zz]:0": host "fe80::zz" in brackets is not an IPv6 address`},
		{"[127.0.0.1%eth0]:0", `health: listen "[127.0.0.1%eth0]:0": host "127.0.0.1%eth0" in brackets is not an IPv6 address`},
		// A host name is RFC 1123 labels joined by dots.
		{"...:0", `health: listen "...:0": host "..." is neither an IP address nor a host name: it ends in a dot`},
		{".:0", `health: listen ".:0": host "." is neither an IP address nor a host name: it ends in a dot`},
		{"localhost.:0", `health: listen "localhost.:0": host "localhost." is neither an IP address nor a host name: it ends in a dot`},
		{".a:0", `health: listen ".a:0": host ".a" is neither an IP address nor a host name: it has an empty label`},
		{"a..b:0", `health: listen "a..b:0": host "a..b" is neither an IP address nor a host name: it has an empty label`},
		{"-:0", `health: listen "-:0": host "-" is neither an IP address nor a host name: label "-" starts or ends with a hyphen`},
		{"x.-:0", `health: listen "x.-:0": host "x.-" is neither an IP address nor a host name: label "-" starts or ends with a hyphen`},
		{"-node.example:0", `health: listen "-node.example:0": host "-node.example" is neither an IP address nor a host name: label "-node" starts or ends with a hyphen`},
		{"node-.example:0", `health: listen "node-.example:0": host "node-.example" is neither an IP address nor a host name: label "node-" starts or ends with a hyphen`},
		{"_:0", `health: listen "_:0": host "_" is neither an IP address nor a host name: label "_" holds '_', which is not a letter, digit or hyphen`},
		{"node-1.example_internal:80", `health: listen "node-1.example_internal:80": host "node-1.example_internal" is neither an IP address nor a host name: label "example_internal" holds '_', which is not a letter, digit or hyphen`},
		{"127.0.0.256:0", `health: listen "127.0.0.256:0": host "127.0.0.256" is neither an IP address nor a host name: its last label "256" is all digits, which only an IP address has`},
		{"10.1:0", `health: listen "10.1:0": host "10.1" is neither an IP address nor a host name: its last label "1" is all digits, which only an IP address has`},
		{"1234:0", `health: listen "1234:0": host "1234" is neither an IP address nor a host name: its last label "1234" is all digits, which only an IP address has`},
		{"0x7f.1:0", `health: listen "0x7f.1:0": host "0x7f.1" is neither an IP address nor a host name: its last label "1" is all digits, which only an IP address has`},
		// What inet_aton, and so the C library's resolver, reads as an
		// IPv4 address: 127.0.0.1, 127.0.0.1, every interface, the same,
		// 127.0.0.1, 1.0.0.1. Then forms glibc refuses (a 0x without a
		// digit, a value out of range), refused too: they mean nothing
		// either way, and another libc may differ.
		{"0x7f000001:9101", `health: listen "0x7f000001:9101": host "0x7f000001" is neither an IP address nor a host name: ` + cNotation},
		{"0x7f.0x1:9101", `health: listen "0x7f.0x1:9101": host "0x7f.0x1" is neither an IP address nor a host name: ` + cNotation},
		{"0x0:9101", `health: listen "0x0:9101": host "0x0" is neither an IP address nor a host name: ` + cNotation},
		{"0x00.0x0:9101", `health: listen "0x00.0x0:9101": host "0x00.0x0" is neither an IP address nor a host name: ` + cNotation},
		{"0X7F.0.0.0X1:0", `health: listen "0X7F.0.0.0X1:0": host "0X7F.0.0.0X1" is neither an IP address nor a host name: ` + cNotation},
		{"1.0x1:0", `health: listen "1.0x1:0": host "1.0x1" is neither an IP address nor a host name: ` + cNotation},
		{"0x.0x1:0", `health: listen "0x.0x1:0": host "0x.0x1" is neither an IP address nor a host name: ` + cNotation},
		{"0xfff.0x1:0", `health: listen "0xfff.0x1:0": host "0xfff.0x1" is neither an IP address nor a host name: ` + cNotation},
		{"0x:0", `health: listen "0x:0": host "0x" is neither an IP address nor a host name: ` + cNotation},
		{strings.Repeat("a", 64) + ".example:0", `health: listen "` + strings.Repeat("a", 64) + `.example:0": host "` + strings.Repeat("a", 64) + `.example" is neither an IP address nor a host name: label "` + strings.Repeat("a", 64) + `" is longer than 63 bytes`},
		{strings.Repeat(strings.Repeat("a", 62)+".", 4) + "bc:0", `health: listen "` + strings.Repeat(strings.Repeat("a", 62)+".", 4) + `bc:0": host "` + strings.Repeat(strings.Repeat("a", 62)+".", 4) + `bc" is neither an IP address nor a host name: longer than 253 bytes`},
		// netip.ParseAddr accepts any byte in an IPv6 zone; Validate must not.
		{"[fe80::1%a\nb]:9101", `health: listen "[fe80::1%a\nb]:9101": host "fe80::1%a\nb" holds a space or a byte outside printable ASCII`},
		{"[fe80::1%a b]:9101", `health: listen "[fe80::1%a b]:9101": host "fe80::1%a b" holds a space or a byte outside printable ASCII`},
		{"[fe80::1%a\x00b]:9101", `health: listen "[fe80::1%a\x00b]:9101": host "fe80::1%a\x00b" holds a space or a byte outside printable ASCII`},
		{"[fe80::1%a\x7fb]:9101", `health: listen "[fe80::1%a\x7fb]:9101": host "fe80::1%a\x7fb" holds a space or a byte outside printable ASCII`},
		{"[fe80::1%a\u00e9b]:9101", `health: listen "[fe80::1%aéb]:9101": host "fe80::1%aéb" holds a space or a byte outside printable ASCII`},
		{"[fe80::1%a\xffb]:9101", `health: listen "[fe80::1%a\xffb]:9101": host "fe80::1%a\xffb" holds a space or a byte outside printable ASCII`},
		{"a\tb:9101", `health: listen "a\tb:9101": host "a\tb" holds a space or a byte outside printable ASCII`},
		// A zone no interface can have.
		{"[fe80::1%eth0%eth1]:9101", `health: listen "[fe80::1%eth0%eth1]:9101": zone "eth0%eth1" of host "fe80::1%eth0%eth1" is not an interface name or index: 1 to 15 letters, digits, dots, underscores or hyphens`},
		{"[::1%a/b]:9101", `health: listen "[::1%a/b]:9101": zone "a/b" of host "::1%a/b" is not an interface name or index: 1 to 15 letters, digits, dots, underscores or hyphens`},
		{"[fe80::1%a:b]:0", `health: listen "[fe80::1%a:b]:0": zone "a:b" of host "fe80::1%a:b" is not an interface name or index: 1 to 15 letters, digits, dots, underscores or hyphens`},
		{"[fe80::1%eth0@if5]:0", `health: listen "[fe80::1%eth0@if5]:0": zone "eth0@if5" of host "fe80::1%eth0@if5" is not an interface name or index: 1 to 15 letters, digits, dots, underscores or hyphens`},
		{"[fe80::1%..]:0", `health: listen "[fe80::1%..]:0": zone ".." of host "fe80::1%.." is not an interface name or index: 1 to 15 letters, digits, dots, underscores or hyphens`},
		{"[fe80::1%" + strings.Repeat("a", 16) + "]:0", `health: listen "[fe80::1%` + strings.Repeat("a", 16) + `]:0": zone "` + strings.Repeat("a", 16) + `" of host "fe80::1%` + strings.Repeat("a", 16) + `" is not an interface name or index: 1 to 15 letters, digits, dots, underscores or hyphens`},
		{"[fe80::1%]:0", `health: listen "[fe80::1%]:0": host "fe80::1%" in brackets is not an IPv6 address`},
	}
	for _, tc := range bad {
		t.Run(strconv.Quote(tc.listen), func(t *testing.T) {
			c := Config{Listen: tc.listen}
			assert.EqualError(t, c.Validate(), tc.want)
		})
	}
}

// TestConfigJSON round-trips Config through encoding/json, as a JSON
// config or sigs.k8s.io/yaml would: the keys are the lower-case ones, an
// unset Enabled stays unset, and an explicit false survives.
func TestConfigJSON(t *testing.T) {
	no, yes := false, true
	tests := []struct {
		name string
		cfg  Config
		json string
	}{
		{"zero", Config{}, `{}`},
		{"disabled", Config{Enabled: &no}, `{"enabled":false}`},
		{"enabled", Config{Enabled: &yes}, `{"enabled":true}`},
		{"listen", Config{Listen: "[::1]:9101"}, `{"listen":"[::1]:9101"}`},
		{"both", Config{Enabled: &no, Listen: ":9101"}, `{"enabled":false,"listen":":9101"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.cfg)
			require.NoError(t, err)
			assert.Equal(t, tc.json, string(b))
			var back Config
			require.NoError(t, json.Unmarshal(b, &back))
			assert.Equal(t, tc.cfg, back)
			assert.Equal(t, tc.cfg.IsEnabled(), back.IsEnabled())
		})
	}

	var c Config
	require.NoError(t, json.Unmarshal([]byte(`{"listen":"127.0.0.1:9102"}`), &c))
	assert.Nil(t, c.Enabled, "an omitted enabled stays nil")
	assert.Equal(t, "127.0.0.1:9102", c.Listen)
}

func TestConfigYAML(t *testing.T) {
	type agentConfig struct {
		Health Config `yaml:"health"`
	}
	tests := []struct {
		name    string
		doc     string
		enabled bool
		listen  string
	}{
		{"block omitted", "node: a\n", true, DefaultListen},
		{"empty block", "health: {}\n", true, DefaultListen},
		{"disabled", "health:\n  enabled: false\n", false, DefaultListen},
		{"enabled", "health:\n  enabled: true\n", true, DefaultListen},
		{"all interfaces", "health:\n  listen: \":9101\"\n", true, ":9101"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var cfg agentConfig
			require.NoError(t, yaml.Unmarshal([]byte(tc.doc), &cfg))
			cfg.Health.ApplyDefaults()
			require.NoError(t, cfg.Health.Validate())
			assert.Equal(t, tc.enabled, cfg.Health.IsEnabled())
			assert.Equal(t, tc.listen, cfg.Health.Listen)
		})
	}
}
