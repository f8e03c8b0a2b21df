package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// warmup is how long the attackers run before the prober starts, so that
// every probe meets the full load.
const warmup = 3 * time.Second

// runLoads runs the loads spec names, each against server, or with
// -server both against health and then plain, one after the other so that
// neither takes CPU from the other's run. The run fails when a row misses
// a bar, health's in the case of both: the bars are the package's, and
// the plain server is the yardstick.
func runLoads(spec string, custom load, d time.Duration, addr, server string, cpus float64) (err error) {
	loads, err := selectLoads(spec, custom, cpus)
	if err != nil {
		return err
	}
	both := server == serverBoth
	servers := []string{server}
	if both {
		servers = []string{serverHealth, serverPlain}
	}
	target := "server: " + serverTitle(server)
	if addr != "" {
		if err := requireLoopback(addr); err != nil {
			return err
		}
		if err := needsOwnServer(loads, server); err != nil {
			return err
		}
		target = "target: " + addr + " (started elsewhere)"
	}
	cg, release, err := cpuCgroupFor(loadsLimit(loads, cpus))
	if err != nil {
		return err
	}
	defer func() {
		if rerr := release(); err == nil {
			err = rerr
		}
	}()
	if cg != nil {
		target += "; CPU limits: " + cg.String()
	}
	fmt.Printf("probeflood: %s; %d s of probes per load, a probe to each endpoint every %v, timeout %v; every attacker reconnects as soon as the server closes or answers it; server bounds on health's rows: %s\n\n", target, int(d.Seconds()), probeEvery, probeTimeout, serverBoundsText)
	fmt.Println(tableHead(loadColumns(both)...))
	failed := false
	for _, l := range loads {
		var rows []loadResult
		for _, s := range servers {
			r, err := runLoad(l, d, addr, s, cg)
			if err != nil {
				return fmt.Errorf("load %q, %s server: %w", l.name, s, err)
			}
			rows = append(rows, r)
		}
		if both {
			rows[0].verdict = judge(l, rows[0], rows[1].srv)
			rows[1].verdict = judge(l, rows[1], nil)
			fmt.Println(formatBoth(rows[0], rows[1]))
		} else {
			rows[0].verdict = judge(l, rows[0], nil)
			fmt.Println(formatRow(rows[0], false, ""))
		}
		failed = failed || !rows[0].verdict.passed()
	}
	if failed {
		return fmt.Errorf("a load missed a bar")
	}
	return nil
}

// needsOwnServer refuses, with -addr, what only a server this command
// starts can do: run both servers, or one under a CPU limit.
func needsOwnServer(loads []load, server string) error {
	if server == serverBoth {
		return fmt.Errorf("-server %s starts each server itself: leave -addr out", serverBoth)
	}
	for _, l := range loads {
		if l.cpus > 0 {
			return fmt.Errorf("load %s runs the server under a CPU limit of %v cores, so it starts the server itself: leave -addr out", l.id, l.cpus)
		}
	}
	return nil
}

// loadsLimit is the CPU limit the first of the loads with one has, and
// which loads have one, to name them when no cgroup can be made.
func loadsLimit(loads []load, flagCPUs float64) (first float64, what string) {
	var ids []string
	for _, l := range loads {
		if l.cpus > 0 {
			first = cmp.Or(first, l.cpus)
			ids = append(ids, l.id)
		}
	}
	what = "the CPU limit of load " + strings.Join(ids, ", ")
	if len(ids) > 1 {
		what = "the CPU limits of loads " + strings.Join(ids, ", ")
	}
	if flagCPUs > 0 {
		what += fmt.Sprintf(" (-cpus %v)", flagCPUs)
	}
	return first, what
}

// cpuCgroupFor makes the cgroup for a CPU limit of cores, if there is one
// (each load sets its own quota before its server starts), and returns it
// with the function that removes it. It is made before the first load
// runs, so that a machine without one fails at once rather than after the
// loads before; what names what needs it in the error.
func cpuCgroupFor(cores float64, what string) (*cpuCgroup, func() error, error) {
	if cores == 0 {
		return nil, func() error { return nil }, nil
	}
	cg, err := newCPUCgroup(cores)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	stop := cg.removeOnSignal()
	return cg, func() error { stop(); return cg.remove() }, nil
}

// child is a running child process of this command.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

func startChild(args ...string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &child{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}, nil
}

// line returns the child's next output line that starts with prefix.
func (c *child) line(prefix string) (string, error) {
	for c.out.Scan() {
		if rest, ok := strings.CutPrefix(c.out.Text(), prefix+" "); ok {
			return rest, nil
		}
	}
	return "", fmt.Errorf("the child ended before printing %q", prefix)
}

// stop closes the child's standard input, which tells it to finish, and
// returns its result line.
func (c *child) stop() (string, error) {
	_ = c.stdin.Close()
	res, err := c.line("result")
	if werr := c.cmd.Wait(); err == nil && werr != nil {
		err = werr
	}
	return res, err
}

// send writes one line to the child's standard input.
func (c *child) send(line string) error {
	_, err := io.WriteString(c.stdin, line+"\n")
	return err
}

// startServer starts the server child and returns it with its address.
// With cores > 0 it runs in cg under that quota, moved in (every thread
// of it) as soon as it starts, seconds before the probing window opens.
func startServer(server string, nofile int, cg *cpuCgroup, cores float64) (*child, string, error) {
	if cores > 0 {
		if err := cg.setQuota(cores); err != nil {
			return nil, "", err
		}
	}
	c, err := startChild("-role=server", "--", "-server", server, "-nofile", fmt.Sprint(nofile))
	if err != nil {
		return nil, "", err
	}
	if cores > 0 {
		err = cg.add(c.cmd.Process)
	}
	var addr string
	if err == nil {
		addr, err = c.line("addr")
	}
	if err != nil {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
		return nil, "", err
	}
	return c, addr, nil
}

// startAttack starts the attack child, which stops by itself after d.
func startAttack(addr string, n counts, d time.Duration) (*child, error) {
	return startChild(attackArgs(addr, n, d)...)
}

// stopServer stops the server child and returns its result.
func stopServer(c *child) (serverResult, error) {
	res, err := c.stop()
	if err != nil {
		return serverResult{}, err
	}
	return parseServerResult(res)
}

// stopAttack stops the attack child and returns its result.
func stopAttack(c *child) (attackResult, error) {
	res, err := c.stop()
	if err != nil {
		return attackResult{}, err
	}
	return parseAttackResult(res)
}

// probeCells formats the probes' success per endpoint and their latency,
// and returns each endpoint's share of correct answers, in probePaths'
// order, for the bars.
func probeCells(results map[string][]outcome) (healthz, readyz, p50, p99 string, shares [2]float64) {
	var cells [2]string
	var all []outcome
	for i, path := range probePaths {
		shares[i], _, _ = summary(results[path])
		ok := 0
		for _, o := range results[path] {
			if o.ok {
				ok++
			}
		}
		cells[i] = fmt.Sprintf("%.2f%% (%d/%d)", 100*shares[i], ok, len(results[path]))
		all = append(all, results[path]...)
	}
	_, q50, q99 := summary(all)
	return cells[0], cells[1], roundMs(q50), roundMs(q99), shares
}

func runLoad(l load, d time.Duration, addr, server string, cg *cpuCgroup) (loadResult, error) {
	r := loadResult{name: l.name, server: server}
	var srv *child
	if addr == "" {
		var err error
		if srv, addr, err = startServer(server, l.serverNofile, cg, l.cpus); err != nil {
			return r, err
		}
		defer srv.cmd.Process.Kill() // a no-op once it has exited
	}
	attack, err := startAttack(addr, l.clients, warmup+d+30*time.Second)
	if err != nil {
		return r, err
	}
	defer attack.cmd.Process.Kill()
	time.Sleep(warmup)

	kernelBefore := readKernelCounters()
	if srv != nil {
		if err := srv.send(markStart); err != nil {
			return r, err
		}
	}
	results := probeFor(addr, d, l.probeDelay)
	if srv != nil {
		if err := srv.send(markEnd); err != nil {
			return r, err
		}
	}
	r.kernel = readKernelCounters().since(kernelBefore)
	if err := attack.send("mark"); err != nil {
		return r, err
	}
	if srv != nil {
		res, err := stopServer(srv) // under load: the attackers are still at it
		if err != nil {
			return r, err
		}
		r.srv = &res
	}
	if r.attack, err = stopAttack(attack); err != nil {
		return r, err
	}
	r.healthz, r.readyz, r.p50, r.p99, r.shares = probeCells(results)
	return r, nil
}

func roundMs(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}
