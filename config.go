package health

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Config is the health block of the agent's configuration. Its json keys
// are its yaml ones, for JSON and sigs.k8s.io/yaml.
type Config struct {
	// Enabled nil is true; false (in YAML also no, off, n) turns the listener off.
	Enabled *bool `yaml:"enabled" json:"enabled,omitempty"`
	// Listen is the host:port to bind, DefaultListen when empty.
	Listen string `yaml:"listen" json:"listen,omitempty"`
	// Watchdogs overrides Server.Watch's timeouts by name; 0 disables a watchdog.
	Watchdogs map[string]Duration `yaml:"watchdogs" json:"watchdogs,omitempty"`
}

// ApplyDefaults fills the zero-valued fields. It leaves Enabled nil, so that
// a config written back out still says "not set".
func (c *Config) ApplyDefaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
}

// IsEnabled reports whether Enabled is not an explicit false.
func (c *Config) IsEnabled() bool {
	return c.Enabled == nil || *c.Enabled
}

// Validate reports the first bad field, naming it and quoting the value;
// call ApplyDefaults first. Listen, checked even when disabled, is
// host:port: a port to 65535, a host empty (every interface), an IP address
// ("[fe80::1%eth0]:9101") or RFC 1123 labels ("0x7f.1" and "a." are not).
// Watchdogs refuses an empty name, a byte outside printable ASCII, and a
// timeout under 1 s but 0.
func (c *Config) Validate() error {
	if err := c.validateListen(); err != nil {
		return err
	}
	return c.validateWatchdogs()
}

// validateListen is Validate's part for Listen; the functions after it say
// why each form of host it refuses is refused.
func (c *Config) validateListen() error {
	if c.Listen == "" {
		return fmt.Errorf("health: listen is empty: call ApplyDefaults before Validate to get DefaultListen (%q), or set host:port", DefaultListen)
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
	// Checked before the host is parsed, because netip.ParseAddr accepts
	// any byte in an IPv6 zone, a newline or a NUL included, and such a
	// host would reach the log and the resolver as it is.
	if !allBytes(host, isGraphic) {
		return fmt.Errorf("health: listen %q: host %q holds a space or a byte outside printable ASCII", c.Listen, host)
	}
	// SplitHostPort takes the brackets off, and lets them hold anything,
	// nothing included. Empty ones are refused although net.Listen reads
	// them as every interface: that opt-in is written ":9101", never by
	// accident.
	if strings.HasPrefix(c.Listen, "[") {
		if host == "" {
			return fmt.Errorf("health: listen %q: empty brackets; to listen on every interface, write %q", c.Listen, ":"+port)
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() {
			return fmt.Errorf("health: listen %q: host %q in brackets is not an IPv6 address", c.Listen, host)
		}
		if zone := a.Zone(); zone != "" && !isZone(zone) {
			return fmt.Errorf("health: listen %q: zone %q of host %q is not an interface name or index: "+
				"1 to %d letters, digits, dots, underscores or hyphens", c.Listen, zone, host, maxZoneLen)
		}
		return nil
	}
	if host == "" || isIPLiteral(host) {
		return nil
	}
	if why := hostNameFault(host); why != "" {
		return fmt.Errorf("health: listen %q: host %q is neither an IP address nor a host name: %s", c.Listen, host, why)
	}
	return nil
}

func isIPLiteral(host string) bool {
	_, err := netip.ParseAddr(host)
	return err == nil
}

// hostNameFault returns what keeps host from being a host name of RFC 1123
// labels, or "" when it is one: at most 253 bytes of labels joined by dots,
// each 1 to 63 letters, digits and hyphens, not starting or ending with a
// hyphen, the last not all digits (RFC 1123 2.1: a name never looks like a
// dotted-decimal address, such as "127.0.0.256", which some resolvers read
// as an address anyway). A name with a trailing dot ("localhost.") is
// refused: it is DNS's spelling of an absolute name, not a host name, and
// Go's resolver asks DNS for it rather than /etc/hosts, so "localhost."
// would fail only at Listen, or bind where DNS says.
func hostNameFault(host string) string {
	if len(host) > 253 {
		return "longer than 253 bytes"
	}
	if strings.HasSuffix(host, ".") {
		return "it ends in a dot"
	}
	labels := strings.Split(host, ".")
	for _, label := range labels {
		switch {
		case label == "":
			return "it has an empty label"
		case len(label) > 63:
			return fmt.Sprintf("label %q is longer than 63 bytes", label)
		case label[0] == '-' || label[len(label)-1] == '-':
			return fmt.Sprintf("label %q starts or ends with a hyphen", label)
		}
		for i := 0; i < len(label); i++ {
			if b := label[i]; !isLetterOrDigit(b) && b != '-' {
				return fmt.Sprintf("label %q holds %q, which is not a letter, digit or hyphen", label, b)
			}
		}
	}
	if last := labels[len(labels)-1]; allBytes(last, isDigit) {
		return fmt.Sprintf("its last label %q is all digits, which only an IP address has", last)
	}
	if isInetAtonForm(labels) {
		return "its labels are numbers in C's notation (0x hex, 0 octal), which the C library's resolver " +
			"reads as an IPv4 address and Go's as a name; write the address in dotted decimal"
	}
	return ""
}

// isInetAtonForm reports whether labels are one to four numbers as
// inet_aton(3) reads them: decimal, hex after 0x, octal after 0. glibc's
// getaddrinfo tries inet_aton before any lookup, so "0x7f.1" binds
// 127.0.0.1 under the cgo resolver and is looked up as a name under Go's.
// Forms glibc refuses (0x without a digit, a value out of range) are
// taken too: such a name means nothing either way, and another libc may
// read it.
func isInetAtonForm(labels []string) bool {
	if len(labels) > 4 {
		return false
	}
	for _, label := range labels {
		digits, of := label, isDigit
		if len(label) >= 2 && label[0] == '0' && (label[1] == 'x' || label[1] == 'X') {
			digits, of = label[2:], isHex
		}
		if !allBytes(digits, of) {
			return false
		}
	}
	return true
}

// maxZoneLen is the longest interface name Linux and the BSDs allow:
// IFNAMSIZ (16) less its NUL.
const maxZoneLen = 15

// isZone reports whether zone can name an interface, by name or index, on
// every system Go listens on: 1 to maxZoneLen letters, digits, dots,
// underscores and hyphens, and not "." or "..", which Linux refuses as
// names. Linux's and the BSDs' interface names fit; on Windows, whose
// names hold spaces, the index does. A zone net.Listen cannot resolve
// ("eth0%eth1", "a/b") would otherwise pass Validate and fail only at
// Listen, or on another node.
func isZone(zone string) bool {
	if len(zone) == 0 || len(zone) > maxZoneLen || zone == "." || zone == ".." {
		return false
	}
	return allBytes(zone, isZoneByte)
}

func isZoneByte(b byte) bool { return isLetterOrDigit(b) || b == '.' || b == '_' || b == '-' }
