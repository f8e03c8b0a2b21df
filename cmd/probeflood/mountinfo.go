package main

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// mount is one line of /proc/self/mountinfo, the fields the CPU limit
// needs. The cgroup hierarchies are found there rather than at fixed paths
// because where they are mounted is the distribution's choice (cgroup v1's
// cpu controller is at /sys/fs/cgroup/cpu on one machine and
// /sys/fs/cgroup/cpu,cpuacct on another, and cgroup2 at /sys/fs/cgroup or
// /sys/fs/cgroup/unified).
type mount struct {
	point  string // where it is mounted, unescaped
	fstype string // such as cgroup (v1) or cgroup2
	// superOpts are the file system's own options: for a cgroup v1
	// hierarchy, the controllers bound to it are among them (rw,cpu,cpuacct).
	superOpts []string
}

// parseMountinfo reads the mountinfo format (proc(5)): per line, the mount
// ID, the parent's, major:minor, the root, the mount point, the mount's
// options, optional fields ended by a lone "-", then the file system type,
// the source and the superblock's options.
func parseMountinfo(r io.Reader) ([]mount, error) {
	var out []mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if sep < 6 || len(fields) < sep+4 {
			return nil, fmt.Errorf("mountinfo line %d: want at least 6 fields, a \"-\" and 3 more: %q", n, line)
		}
		out = append(out, mount{
			point:     unescapeMountinfo(fields[4]),
			fstype:    fields[sep+1],
			superOpts: strings.Split(fields[sep+3], ","),
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	return out, nil
}

// unescapeMountinfo undoes the kernel's escapes in a mountinfo path: a
// space, tab, newline or backslash is written as a backslash and three
// octal digits (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupMount is a cgroup hierarchy that could hold the server child under
// a CPU quota.
type cgroupMount struct {
	version int    // 1 or 2
	point   string // its mount point
}

// cpuCgroupMounts lists, from mountinfo, where a cgroup with a CPU quota
// may be made: every cgroup2 mount, then every cgroup v1 hierarchy with
// the cpu controller. A controller is bound to one hierarchy at a time,
// so the order only decides which error is listed first when none works.
func cpuCgroupMounts(ms []mount) []cgroupMount {
	var v2, v1 []cgroupMount
	seen := map[string]bool{}
	for _, m := range ms {
		if seen[m.point] {
			continue
		}
		switch {
		case m.fstype == "cgroup2":
			v2 = append(v2, cgroupMount{version: 2, point: m.point})
		case m.fstype == "cgroup" && slices.Contains(m.superOpts, "cpu"):
			v1 = append(v1, cgroupMount{version: 1, point: m.point})
		default:
			continue
		}
		seen[m.point] = true
	}
	return append(v2, v1...)
}
