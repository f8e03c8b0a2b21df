package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On the machine's own cgroups, as root: the cgroup is made with its
// quota, a process moved in is there, and once it is killed, though not
// yet reaped, the cgroup is removed. Without root, or without a cgroup
// with the cpu controller, there is nothing to try it on.
func TestRealCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a cgroup needs root")
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command to move into the cgroup")
	}
	cg, err := newCPUCgroup(0.25)
	if err != nil {
		t.Skipf("no cgroup on this machine: %v", err)
	}
	defer func() { assert.NoError(t, cg.remove()) }()
	assert.True(t, strings.HasSuffix(cg.dir, "/probeflood-"+strconv.Itoa(os.Getpid())), cg.dir)
	quota := map[int]string{1: "cpu.cfs_quota_us", 2: "cpu.max"}[cg.version]
	want := map[int]string{1: "25000\n", 2: "25000 100000\n"}[cg.version]
	assert.Equal(t, want, readFile(t, filepath.Join(cg.dir, quota)))

	cmd := exec.Command(sleep, "30")
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	require.NoError(t, cg.add(cmd.Process))
	procs := readFile(t, filepath.Join(cg.dir, "cgroup.procs"))
	assert.Equal(t, strconv.Itoa(cmd.Process.Pid)+"\n", procs)
	self := readFile(t, "/proc/"+strconv.Itoa(cmd.Process.Pid)+"/cgroup")
	assert.Contains(t, self, "/probeflood-"+strconv.Itoa(os.Getpid())+"\n")

	require.NoError(t, cmd.Process.Kill())
	require.NoError(t, cg.remove(), "a killed child leaves the cgroup before it is reaped")
	assert.NoDirExists(t, cg.dir)
}
