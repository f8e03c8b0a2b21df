package health

import (
	"encoding/json"
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

func TestConfigValidate(t *testing.T) {
	good := []string{
		"127.0.0.1:9101", ":9101", "0.0.0.0:0", "[::1]:9101", "[::]:65535",
		"localhost:9101", "node-1.example_internal:80", "[fe80::1%eth0]:9101", "127.0.0.1:09101",
	}
	for _, listen := range good {
		t.Run(listen, func(t *testing.T) {
			c := Config{Listen: listen}
			assert.NoError(t, c.Validate())
		})
	}
	bad := []struct{ listen, want string }{
		{"", `health: listen is empty: want host:port, such as "127.0.0.1:9101"`},
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
		{"a/b:9101", `health: listen "a/b:9101": host "a/b" is neither an IP address nor a host name`},
		// netip.ParseAddr accepts any byte in an IPv6 zone; Validate must not.
		{"[fe80::1%a\nb]:9101", `health: listen "[fe80::1%a\nb]:9101": host "fe80::1%a\nb" holds a space or a byte outside printable ASCII`},
		{"[fe80::1%a b]:9101", `health: listen "[fe80::1%a b]:9101": host "fe80::1%a b" holds a space or a byte outside printable ASCII`},
		{"[fe80::1%a\x00b]:9101", `health: listen "[fe80::1%a\x00b]:9101": host "fe80::1%a\x00b" holds a space or a byte outside printable ASCII`},
		{"[fe80::1%a\x7fb]:9101", `health: listen "[fe80::1%a\x7fb]:9101": host "fe80::1%a\x7fb" holds a space or a byte outside printable ASCII`},
		{"[fe80::1%a\u00e9b]:9101", `health: listen "[fe80::1%aéb]:9101": host "fe80::1%aéb" holds a space or a byte outside printable ASCII`},
		{"[fe80::1%a\xffb]:9101", `health: listen "[fe80::1%a\xffb]:9101": host "fe80::1%a\xffb" holds a space or a byte outside printable ASCII`},
		{"a\tb:9101", `health: listen "a\tb:9101": host "a\tb" holds a space or a byte outside printable ASCII`},
	}
	for _, tc := range bad {
		t.Run(tc.listen, func(t *testing.T) {
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
