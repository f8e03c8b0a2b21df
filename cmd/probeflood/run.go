package main

import (
	"bufio"
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

func runLoads(spec string, custom load, d time.Duration, addr string) error {
	loads, err := selectLoads(spec, custom)
	if err != nil {
		return err
	}
	if addr != "" {
		if err := requireLoopback(addr); err != nil {
			return err
		}
	}
	fmt.Printf("probeflood: %d s of probes per load, a probe to each endpoint every %v, timeout %v\n\n", int(d.Seconds()), probeEvery, probeTimeout)
	fmt.Println("| load | /healthz ok | /readyz ok | p50 | p99 | attacker connects/s | attacker connects failed | kernel: accept queue overflows / SYN queue full (cookies, drops) | server peak RSS | server peak goroutines | Serve returned after cancel | bar |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	failed := false
	for _, l := range loads {
		row, passed, err := runLoad(l, d, addr)
		if err != nil {
			return fmt.Errorf("load %q: %w", l.name, err)
		}
		fmt.Println(row)
		failed = failed || !passed
	}
	if failed {
		return fmt.Errorf("a load fell below its bar")
	}
	return nil
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

func runLoad(l load, d time.Duration, addr string) (row string, passed bool, err error) {
	var server *child
	if addr == "" {
		server, err = startChild("-role=server", "--", "-nofile", fmt.Sprint(l.serverNofile))
		if err != nil {
			return "", false, err
		}
		defer server.cmd.Process.Kill() // a no-op once it has exited
		if addr, err = server.line("addr"); err != nil {
			return "", false, err
		}
	}
	attack, err := startChild("-role=attack", "--", "-addr", addr,
		"-slowloris", fmt.Sprint(l.slowloris), "-idle", fmt.Sprint(l.idle), "-churn", fmt.Sprint(l.churn),
		"-duration", (warmup + d + 30*time.Second).String())
	if err != nil {
		return "", false, err
	}
	defer attack.cmd.Process.Kill()
	time.Sleep(warmup)

	kernelBefore := readKernelCounters()
	results := probeFor(addr, d, l.probeDelay)
	kernel := readKernelCounters().since(kernelBefore)
	if _, err := io.WriteString(attack.stdin, "mark\n"); err != nil {
		return "", false, err
	}

	serverFigures := "n/a | n/a | n/a"
	if server != nil {
		res, err := server.stop() // under load: the attackers are still at it
		if err != nil {
			return "", false, err
		}
		var goroutines, rssKiB int64
		var shutdownMs float64
		if _, err := fmt.Sscanf(res, "goroutines=%d rss_kib=%d shutdown_ms=%f", &goroutines, &rssKiB, &shutdownMs); err != nil {
			return "", false, fmt.Errorf("server result %q: %w", res, err)
		}
		serverFigures = fmt.Sprintf("%.1f MiB | %d | %.0f ms", float64(rssKiB)/1024, goroutines, shutdownMs)
	}
	res, err := attack.stop()
	if err != nil {
		return "", false, err
	}
	var dials, dialErrors int64
	var seconds float64
	if _, err := fmt.Sscanf(res, "dials=%d seconds=%f dial_errors=%d", &dials, &seconds, &dialErrors); err != nil {
		return "", false, fmt.Errorf("attacker result %q: %w", res, err)
	}

	passed = true
	cells := make([]string, 0, 2)
	var all []outcome
	for _, path := range []string{"/healthz", "/readyz"} {
		share, _, _ := summary(results[path])
		ok := 0
		for _, o := range results[path] {
			if o.ok {
				ok++
			}
		}
		cells = append(cells, fmt.Sprintf("%.2f%% (%d/%d)", 100*share, ok, len(results[path])))
		all = append(all, results[path]...)
		if l.bar > 0 && share < l.bar {
			passed = false
		}
	}
	_, p50, p99 := summary(all)
	bar := "report only"
	if l.bar > 0 {
		verdict := "pass"
		if !passed {
			verdict = "FAIL"
		}
		bar = fmt.Sprintf("≥ %.1f%%: %s", 100*l.bar, verdict)
	}
	name := l.name
	if l.id > 0 {
		name = fmt.Sprintf("%d. %s", l.id, l.name)
	}
	row = fmt.Sprintf("| %s | %s | %s | %s | %s | %.0f | %d | %d / %d, %d | %s | %s |", name, cells[0], cells[1],
		roundMs(p50), roundMs(p99), float64(dials)/seconds, dialErrors,
		kernel.listenOverflows, kernel.synQueueCookies, kernel.synQueueDrops, serverFigures, bar)
	return row, passed, nil
}

func roundMs(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}
