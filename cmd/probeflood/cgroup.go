package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// cfsPeriod is the CFS period of the quota: the kernel's default and the
// kubelet's, so that a limit of 0.25 cores is 25 ms of CPU in every 100 ms,
// as a container with resources.limits.cpu: 250m gets. The period matters:
// a server that spends its quota early in a period waits for the next one,
// and that wait is what a probe sees.
const cfsPeriod = 100 * time.Millisecond

// minCores is the smallest limit: the kernel refuses a quota under 1 ms a
// period.
const minCores = 0.01

// checkCores refuses a limit the kernel would not take or that would limit
// nothing: more cores than the machine has is no limit, and a figure
// printed under it would be read as a limited one.
func checkCores(flagName string, cores float64, ncpu int) error {
	if cores == 0 {
		return nil
	}
	if math.IsNaN(cores) || cores < minCores || cores > float64(ncpu) {
		return fmt.Errorf("%s %v: want 0 (no limit) or from %v to %d cores (this machine's)", flagName, cores, minCores, ncpu)
	}
	return nil
}

// quotaMicros is the quota, in microseconds a period, for a limit in cores.
func quotaMicros(cores float64) int64 {
	return int64(math.Round(cores * float64(cfsPeriod/time.Microsecond)))
}

// cgroupFS is how a cgroup's directory is made and removed. On a cgroup
// file system the kernel fills the directory with its control files at
// mkdir and empties it at rmdir; tests give a fake that does the kernel's
// part in a temporary directory, so that they run without root.
type cgroupFS struct {
	mkdir func(dir string) error
	rmdir func(dir string) error
}

// cpuCgroup is the cgroup of this command's own that its server child runs
// in under a CPU limit: a CFS quota, as the kubelet sets for a container,
// rather than a CPU affinity or a nice level, because a quota is what
// throttles an agent's process in a pod, a period at a time.
type cpuCgroup struct {
	version int    // 1 or 2
	dir     string // the cgroup's directory
	fs      cgroupFS

	mu    sync.Mutex
	moved []*os.Process // the children moved in, which an interrupt kills
}

// noCgroupError says that no cgroup could be made, and why, per place
// tried.
type noCgroupError struct{ tried []string }

func (e *noCgroupError) Error() string {
	return "no cgroup with a CPU quota could be made for the server; tried:\n\t" + strings.Join(e.tried, "\n\t")
}

// makeCPUCgroup makes a cgroup called name under the first of the mounts
// where it can, with a quota of cores, and otherwise returns a
// noCgroupError naming each mount tried and what failed there.
func makeCPUCgroup(mounts []mount, name string, cores float64, fs cgroupFS) (*cpuCgroup, error) {
	var tried []string
	for _, m := range cpuCgroupMounts(mounts) {
		cg, err := makeCgroupAt(m, name, cores, fs)
		if err == nil {
			return cg, nil
		}
		tried = append(tried, fmt.Sprintf("cgroup v%d at %s: %v", m.version, m.point, err))
	}
	if len(tried) == 0 {
		tried = append(tried, "/proc/self/mountinfo: no cgroup2 mount, and no cgroup v1 mount with the cpu controller")
	}
	return nil, &noCgroupError{tried: tried}
}

// makeCgroupAt makes the cgroup under one mount and sets its quota; a
// cgroup made whose quota cannot be set is removed again.
func makeCgroupAt(m cgroupMount, name string, cores float64, fs cgroupFS) (*cpuCgroup, error) {
	if m.version == 2 {
		if err := enableCPUController(m.point); err != nil {
			return nil, err
		}
	}
	cg := &cpuCgroup{version: m.version, dir: filepath.Join(m.point, name), fs: fs}
	if err := fs.mkdir(cg.dir); err != nil {
		return nil, err
	}
	if err := cg.setQuota(cores); err != nil {
		_ = fs.rmdir(cg.dir)
		return nil, err
	}
	return cg, nil
}

// enableCPUController makes cgroup v2's cpu controller available to the
// children of the cgroup at dir: it must be among that cgroup's
// controllers (cgroup.controllers), and in its cgroup.subtree_control,
// where it is added if missing. That is left as it is at the end, as
// systemd leaves it: taking it out again would take it from any other
// child cgroup that uses it.
func enableCPUController(dir string) error {
	have, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return err
	}
	if !hasWord(string(have), "cpu") {
		return fmt.Errorf("the cpu controller is not available there (cgroup.controllers: %q)", strings.TrimSpace(string(have)))
	}
	control := filepath.Join(dir, "cgroup.subtree_control")
	enabled, err := os.ReadFile(control)
	if err != nil {
		return err
	}
	if hasWord(string(enabled), "cpu") {
		return nil
	}
	if err := writeControl(control, "+cpu"); err != nil {
		if errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("%w (a cgroup with processes of its own cannot hand controllers down to its children)", err)
		}
		return err
	}
	return nil
}

// setQuota writes the quota for a limit of cores: cgroup v2's cpu.max,
// "quota period" in microseconds, or cgroup v1's cpu.cfs_period_us and
// cpu.cfs_quota_us, the period first, so that the quota never applies to
// another period, even for a moment.
func (cg *cpuCgroup) setQuota(cores float64) error {
	quota, period := quotaMicros(cores), int64(cfsPeriod/time.Microsecond)
	if cg.version == 2 {
		return writeControl(filepath.Join(cg.dir, "cpu.max"), fmt.Sprintf("%d %d", quota, period))
	}
	if err := writeControl(filepath.Join(cg.dir, "cpu.cfs_period_us"), strconv.FormatInt(period, 10)); err != nil {
		return err
	}
	return writeControl(filepath.Join(cg.dir, "cpu.cfs_quota_us"), strconv.FormatInt(quota, 10))
}

// add moves a process into the cgroup, every thread of it (cgroup.procs,
// in both versions); the threads it starts later are born there.
func (cg *cpuCgroup) add(p *os.Process) error {
	if err := writeControl(filepath.Join(cg.dir, "cgroup.procs"), strconv.Itoa(p.Pid)); err != nil {
		return err
	}
	cg.mu.Lock()
	cg.moved = append(cg.moved, p)
	cg.mu.Unlock()
	return nil
}

// String says, for the table's title, where the limit is set.
func (cg *cpuCgroup) String() string {
	file := "cpu.max"
	if cg.version == 1 {
		file = "cpu.cfs_quota_us"
	}
	return fmt.Sprintf("cgroup v%d %s, %s, period %v", cg.version, cg.dir, file, cfsPeriod)
}

// remove removes the cgroup. A cgroup with a process in it cannot be
// removed, and a child that has just been killed may take a moment to
// leave, so remove retries for a while on EBUSY before it gives up.
func (cg *cpuCgroup) remove() error {
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := cg.fs.rmdir(cg.dir)
		switch {
		case err == nil, errors.Is(err, os.ErrNotExist):
			return nil
		case !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline):
			return fmt.Errorf("removing the CPU limit's cgroup: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// removeOnSignal kills the children moved into the cgroup, removes it and
// exits when the command is interrupted or terminated, so that an
// interrupted run leaves no cgroup behind (the server child would leave it
// anyway, at the closing of its standard input, but the directory stays
// until someone removes it). The function it returns stops that, once the
// run removes the cgroup itself.
func (cg *cpuCgroup) removeOnSignal() (stop func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sig:
			cg.mu.Lock()
			for _, p := range cg.moved {
				_ = p.Kill() // an error is a child that has already gone
			}
			cg.mu.Unlock()
			if err := cg.remove(); err != nil {
				fmt.Fprintf(os.Stderr, "probeflood: %v: %v\n", s, err)
			} else {
				fmt.Fprintf(os.Stderr, "probeflood: %v: removed %s\n", s, cg.dir)
			}
			os.Exit(1)
		case <-done:
		}
	}()
	return func() {
		signal.Stop(sig)
		close(done)
	}
}

// writeControl writes a cgroup control file. It does not create the file:
// a control file that is missing is a controller that is not there, which
// the error should say rather than hide behind a new, ordinary file.
func writeControl(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is said once, below
		}
		return fmt.Errorf("write %q to %s: %w", value, path, err)
	}
	return nil
}

// hasWord says whether the space-separated list s has w.
func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}
