package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Mountinfo as three kinds of machine print it: cgroup v1 alone (this
// one's), cgroup v2 alone, and systemd's hybrid, v1 controllers with an
// empty cgroup2 beside them.
const (
	mountinfoV1 = `22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
`
	mountinfoV2 = `25 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`
	mountinfoHybrid = `24 1 8:2 / / rw,relatime shared:1 - ext4 /dev/sda2 rw
28 21 0:24 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
29 28 0:25 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
30 28 0:26 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
34 28 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,cpu,cpuacct
36 28 0:32 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,cpuset
`
)

func TestParseMountinfo(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []cgroupMount
	}{
		{"v1", mountinfoV1, []cgroupMount{{1, "/sys/fs/cgroup/cpu"}}},
		{"v2", mountinfoV2, []cgroupMount{{2, "/sys/fs/cgroup"}}},
		{"hybrid", mountinfoHybrid, []cgroupMount{{2, "/sys/fs/cgroup/unified"}, {1, "/sys/fs/cgroup/cpu,cpuacct"}}},
		{"no cgroups", "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n", nil},
		// cpuset is not cpu; an escaped space; a bind mount seen twice;
		// several optional fields; a blank line.
		{"odd", `40 31 0:31 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset
41 31 0:29 / /mnt/my\040cgroups rw shared:3 master:2 propagate_from:1 - cgroup none rw,cpuacct,cpu

42 31 0:29 / /mnt/my\040cgroups rw - cgroup none rw,cpuacct,cpu
`, []cgroupMount{{1, "/mnt/my cgroups"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms, err := parseMountinfo(strings.NewReader(tc.in))
			require.NoError(t, err)
			assert.Equal(t, tc.want, cpuCgroupMounts(ms))
		})
	}
	ms, err := parseMountinfo(strings.NewReader(mountinfoHybrid))
	require.NoError(t, err)
	require.Len(t, ms, 6)
	assert.Equal(t, mount{point: "/sys/fs/cgroup/cpu,cpuacct", fstype: "cgroup", superOpts: []string{"rw", "cpu", "cpuacct"}}, ms[4])

	for _, bad := range []string{"31 23 0:28 / /sys/fs/cgroup rw,relatime tmpfs tmpfs rw", "1 2 3 4 5 - cgroup2 cgroup2 rw", "1 2 3:4 / /x rw - cgroup2"} {
		_, err := parseMountinfo(strings.NewReader(mountinfoV2 + bad + "\n"))
		assert.ErrorContains(t, err, "mountinfo line 3:", bad)
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`:         "/plain",
		`/a\040b`:        "/a b",
		`/tab\011x\134y`: "/tab\tx\\y",
		`/short\04`:      `/short\04`,
		`/notoctal\09x`:  `/notoctal\09x`,
		`/end\`:          `/end\`,
	} {
		assert.Equal(t, want, unescapeMountinfo(in), in)
	}
}

// fakeCgroupFS is a cgroup file system in a temporary directory: mkdir
// creates the control files the kernel would for the version, and rmdir
// refuses, as the kernel does, while cgroup.procs lists a process.
func fakeCgroupFS(version int) cgroupFS {
	files := []string{"cgroup.procs", "cpu.cfs_period_us", "cpu.cfs_quota_us"}
	if version == 2 {
		files = []string{"cgroup.procs", "cpu.max"}
	}
	return cgroupFS{
		mkdir: func(dir string) error {
			if err := os.Mkdir(dir, 0o755); err != nil {
				return err
			}
			for _, f := range files {
				if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
					return err
				}
			}
			return nil
		},
		rmdir: func(dir string) error {
			procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			if err != nil {
				return err
			}
			if len(procs) > 0 {
				return &os.PathError{Op: "rmdir", Path: dir, Err: syscall.EBUSY}
			}
			return os.RemoveAll(dir)
		},
	}
}

// fakeV2Root is a cgroup2 root in a temporary directory, with the
// controllers given and none handed down to children yet.
func fakeV2Root(t *testing.T, controllers string) string {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte(controllers+"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("\n"), 0o644))
	return dir
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func TestCgroupV2Quota(t *testing.T) {
	root := fakeV2Root(t, "cpuset cpu io memory pids")
	mounts := []mount{{point: root, fstype: "cgroup2", superOpts: []string{"rw"}}}
	cg, err := makeCPUCgroup(mounts, "probeflood-7", 0.25, fakeCgroupFS(2))
	require.NoError(t, err)
	dir := filepath.Join(root, "probeflood-7")
	assert.Equal(t, dir, cg.dir)
	assert.Equal(t, "+cpu", readFile(t, filepath.Join(root, "cgroup.subtree_control")), "the cpu controller handed down")
	assert.Equal(t, "25000 100000", readFile(t, filepath.Join(dir, "cpu.max")))
	assert.Equal(t, "cgroup v2 "+dir+", cpu.max, period 100ms", cg.String())

	require.NoError(t, cg.setQuota(0.05))
	assert.Equal(t, "5000 100000", readFile(t, filepath.Join(dir, "cpu.max")))

	self, err := os.FindProcess(os.Getpid())
	require.NoError(t, err)
	require.NoError(t, cg.add(self))
	assert.Equal(t, strconv.Itoa(os.Getpid()), readFile(t, filepath.Join(dir, "cgroup.procs")))
	assert.Len(t, cg.moved, 1)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), nil, 0o644)) // the process left
	require.NoError(t, cg.remove())
	assert.NoDirExists(t, dir)
	assert.NoError(t, cg.remove(), "removing it twice is no error")

	// A subtree_control that has cpu already is left alone.
	require.NoError(t, os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("cpu memory\n"), 0o644))
	_, err = makeCPUCgroup(mounts, "probeflood-8", 1, fakeCgroupFS(2))
	require.NoError(t, err)
	assert.Equal(t, "cpu memory\n", readFile(t, filepath.Join(root, "cgroup.subtree_control")))
	assert.Equal(t, "100000 100000", readFile(t, filepath.Join(root, "probeflood-8", "cpu.max")))
}

func TestCgroupV1Quota(t *testing.T) {
	root := t.TempDir()
	mounts := []mount{{point: root, fstype: "cgroup", superOpts: []string{"rw", "cpu", "cpuacct"}}}
	cg, err := makeCPUCgroup(mounts, "probeflood-9", 0.25, fakeCgroupFS(1))
	require.NoError(t, err)
	dir := filepath.Join(root, "probeflood-9")
	assert.Equal(t, "100000", readFile(t, filepath.Join(dir, "cpu.cfs_period_us")))
	assert.Equal(t, "25000", readFile(t, filepath.Join(dir, "cpu.cfs_quota_us")))
	assert.Equal(t, "cgroup v1 "+dir+", cpu.cfs_quota_us, period 100ms", cg.String())
	require.NoError(t, cg.setQuota(0.05))
	assert.Equal(t, "5000", readFile(t, filepath.Join(dir, "cpu.cfs_quota_us")))
	require.NoError(t, cg.remove())
	assert.NoDirExists(t, dir)
}

// When no cgroup can be made, the error names every place tried and what
// failed there; a directory made whose quota could not be written is
// removed again.
func TestNoCgroupError(t *testing.T) {
	empty := fakeV2Root(t, "")       // like /sys/fs/cgroup/unified beside v1
	missing := t.TempDir() + "/gone" // a mount point that is not there
	bare := t.TempDir()              // mkdir makes no control files
	noFiles := cgroupFS{mkdir: func(dir string) error { return os.Mkdir(dir, 0o755) }, rmdir: os.Remove}
	mounts := []mount{
		{point: empty, fstype: "cgroup2"},
		{point: missing, fstype: "cgroup", superOpts: []string{"rw", "cpu"}},
		{point: bare, fstype: "cgroup", superOpts: []string{"rw", "cpu", "cpuacct"}},
		{point: "/sys/fs/cgroup/memory", fstype: "cgroup", superOpts: []string{"rw", "memory"}},
	}
	_, err := makeCPUCgroup(mounts, "probeflood-1", 0.25, noFiles)
	var nce *noCgroupError
	require.True(t, errors.As(err, &nce), "%v", err)
	require.Len(t, nce.tried, 3, "the memory hierarchy is not tried")
	assert.Equal(t, "cgroup v2 at "+empty+`: the cpu controller is not available there (cgroup.controllers: "")`, nce.tried[0])
	assert.Equal(t, "cgroup v1 at "+missing+": mkdir "+missing+"/probeflood-1: no such file or directory", nce.tried[1])
	assert.Equal(t, "cgroup v1 at "+bare+": open "+bare+"/probeflood-1/cpu.cfs_period_us: no such file or directory", nce.tried[2])
	assert.NoDirExists(t, filepath.Join(bare, "probeflood-1"), "removed again")
	assert.True(t, strings.HasPrefix(err.Error(), "no cgroup with a CPU quota could be made for the server; tried:\n\tcgroup v2 at "), err.Error())

	_, err = makeCPUCgroup(nil, "probeflood-1", 0.25, noFiles)
	assert.EqualError(t, err, "no cgroup with a CPU quota could be made for the server; tried:\n\t/proc/self/mountinfo: no cgroup2 mount, and no cgroup v1 mount with the cpu controller")
}

// A quota write the kernel refuses names the file and the value.
func TestWriteControl(t *testing.T) {
	dir := t.TempDir()
	err := writeControl(filepath.Join(dir, "cpu.max"), "25000 100000")
	assert.EqualError(t, err, "open "+dir+"/cpu.max: no such file or directory", "not created")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	err = writeControl(filepath.Join(dir, "d"), "x")
	assert.ErrorContains(t, err, filepath.Join(dir, "d"))
}

func TestCheckCores(t *testing.T) {
	for _, ok := range []float64{0, 0.01, 0.05, 0.25, 1, 2} {
		assert.NoError(t, checkCores("-cpus", ok, 2), ok)
	}
	for _, bad := range []float64{-1, 0.005, 2.5} {
		assert.EqualError(t, checkCores("-cpus", bad, 2), "-cpus "+fmt.Sprint(bad)+": want 0 (no limit) or from 0.01 to 2 cores (this machine's)")
	}
	assert.ErrorContains(t, checkCores("-cpus", math.NaN(), 2), "-cpus NaN: want")
	assert.ErrorContains(t, checkCores("-cpus", math.Inf(1), 2), "-cpus +Inf: want")
	assert.EqualValues(t, 25000, quotaMicros(0.25))
	assert.EqualValues(t, 5000, quotaMicros(0.05))
	assert.EqualValues(t, 1000, quotaMicros(0.01))
	assert.EqualValues(t, 33333, quotaMicros(1.0/3))
}
