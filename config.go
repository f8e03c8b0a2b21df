package health

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// Config is the health block of the agent's configuration. It carries json
// tags as well as yaml ones, so that a JSON config, or YAML read through
// sigs.k8s.io/yaml (which goes through JSON), uses the same lower-case
// keys.
type Config struct {
	// Enabled is a pointer so that an omitted field (nil) means the
	// default, true, and only an explicit "enabled: false" turns the
	// listener off: a kubelet probing a port nobody listens on would
	// restart the agent.
	Enabled *bool `yaml:"enabled" json:"enabled,omitempty"`
	// Listen is the host:port to bind, DefaultListen when empty. An empty
	// host binds every interface, which exposes the unauthenticated
	// endpoints to the network; it is allowed as an explicit opt-in.
	Listen string `yaml:"listen" json:"listen,omitempty"`
}

// ApplyDefaults fills the zero-valued fields. It leaves Enabled nil, so that
// a config written back out still says "not set" rather than an explicit
// true.
func (c *Config) ApplyDefaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
}

// IsEnabled reports whether the listener should run: true unless Enabled is
// an explicit false.
func (c *Config) IsEnabled() bool {
	return c.Enabled == nil || *c.Enabled
}

// Validate reports the first bad field, naming the field and quoting the
// value. It checks Listen even when the config is disabled, so that a typo
// surfaces the day it is written rather than the day the listener is turned
// back on. Call ApplyDefaults first: an empty Listen is an error here.
func (c *Config) Validate() error {
	if c.Listen == "" {
		return fmt.Errorf("health: listen is empty: want host:port, such as %q", DefaultListen)
	}
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		// Only the reason, not net's error: its text repeats the address
		// unquoted, which would carry any control byte into the log.
		why := err.Error()
		var ae *net.AddrError
		if errors.As(err, &ae) {
			why = ae.Err
		}
		return fmt.Errorf("health: listen %q is not host:port: %s", c.Listen, why)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("health: listen %q: port %q is not a number from 0 to 65535", c.Listen, port)
	}
	if !isPrintableASCII(host) {
		return fmt.Errorf("health: listen %q: host %q holds a space or a byte outside printable ASCII", c.Listen, host)
	}
	if host != "" && !isIPLiteral(host) && !isHostName(host) {
		return fmt.Errorf("health: listen %q: host %q is neither an IP address nor a host name", c.Listen, host)
	}
	return nil
}

// isPrintableASCII reports whether every byte of host is printable ASCII
// other than the space (0x21 to 0x7e). It is checked before the host is
// parsed because netip.ParseAddr accepts any byte in an IPv6 zone, a
// newline or a NUL included, and such a host would reach the log and the
// resolver as it is.
func isPrintableASCII(host string) bool {
	for i := 0; i < len(host); i++ {
		if b := host[i]; b < 0x21 || b > 0x7e {
			return false
		}
	}
	return true
}

func isIPLiteral(host string) bool {
	_, err := netip.ParseAddr(host)
	return err == nil
}

// isHostName accepts the letters, digits, hyphens, underscores and dots of a
// DNS name, at most 253 bytes, so that a value with spaces or control bytes
// is caught at startup rather than by the resolver.
func isHostName(host string) bool {
	if len(host) > 253 {
		return false
	}
	for i := 0; i < len(host); i++ {
		switch b := host[i]; {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9', b == '-', b == '.', b == '_':
		default:
			return false
		}
	}
	return true
}
