package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/health/internal/hostile"
)

// runAttack is the attacker child. It runs as many clients of each kind
// (see kinds) as its flags ask, each playing its part (hostile.Client.Run)
// and reconnecting the moment it is done. Everything stops at the
// deadline, when standard input closes, or after -max-dials connections.
func runAttack(args []string) error {
	fs, f := attackFlags()
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := requireLoopback(f.addr); err != nil {
		return err
	}
	if err := f.clients.check(); err != nil {
		return err
	}
	a := &attacker{addr: f.addr, maxDials: f.maxDials}
	ctx, cancel := context.WithTimeout(context.Background(), f.duration)
	defer cancel()
	start := time.Now()
	// The parent writes a line when its probing ends, before it stops the
	// server, and closes standard input to stop the attack. The figures
	// reported are those of the probing window: once the server is gone,
	// every connect fails, and counting those would say nothing.
	var report atomic.Value // the figures at the parent's mark
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			report.Store(attackResult{dials: a.dials.Load(), seconds: time.Since(start).Seconds(), dialErrors: a.dialErrors.Load()}.String())
		}
		cancel()
	}()

	var wg sync.WaitGroup
	for _, k := range kinds {
		n := f.clients[k.Name]
		if n < 0 {
			n = runtime.NumCPU()
		}
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a.client(ctx, k)
			}()
		}
	}
	wg.Wait()
	if report.Load() == nil {
		report.Store(attackResult{dials: a.dials.Load(), seconds: time.Since(start).Seconds(), dialErrors: a.dialErrors.Load()}.String())
	}
	fmt.Println(report.Load())
	return nil
}

// attackConfig is the attack child's flags.
type attackConfig struct {
	addr     string
	clients  counts
	duration time.Duration
	maxDials int64
}

func attackFlags() (*flag.FlagSet, *attackConfig) {
	var f attackConfig
	fs := flag.NewFlagSet("attack", flag.ContinueOnError)
	fs.StringVar(&f.addr, "addr", "", "loopback address to attack")
	f.clients = counts{}
	for _, k := range kinds {
		fs.Func(k.Name, k.Help, func(v string) error {
			n, err := strconv.Atoi(v)
			if n != 0 {
				f.clients[k.Name] = n
			}
			return err
		})
	}
	fs.DurationVar(&f.duration, "duration", 30*time.Second, "stop after this long")
	fs.Int64Var(&f.maxDials, "max-dials", 20_000_000, "stop after this many connections")
	return fs, &f
}

// attackArgs is the attack child's command line.
func attackArgs(addr string, n counts, d time.Duration) []string {
	args := []string{"-role=attack", "--", "-addr", addr, "-duration", d.String()}
	for _, k := range kinds {
		if count := n[k.Name]; count != 0 {
			args = append(args, "-"+k.Name, fmt.Sprint(count))
		}
	}
	return args
}

// attackResult is the attack child's result line.
type attackResult struct {
	dials, dialErrors int64
	seconds           float64
}

func (r attackResult) String() string {
	return fmt.Sprintf("result dials=%d seconds=%.1f dial_errors=%d", r.dials, r.seconds, r.dialErrors)
}

// rate is the connections per second the attackers opened.
func (r attackResult) rate() float64 {
	if r.seconds <= 0 {
		return 0
	}
	return float64(r.dials) / r.seconds
}

// parseAttackResult reads a result line, without its "result " prefix.
func parseAttackResult(s string) (attackResult, error) {
	var r attackResult
	if _, err := fmt.Sscanf(s, "dials=%d seconds=%f dial_errors=%d", &r.dials, &r.seconds, &r.dialErrors); err != nil {
		return r, fmt.Errorf("attacker result %q: %w", s, err)
	}
	return r, nil
}

type attacker struct {
	addr       string
	maxDials   int64
	dials      atomic.Int64
	dialErrors atomic.Int64
}

// dial opens one connection, or returns nil when the attack is over.
func (a *attacker) dial(ctx context.Context) net.Conn {
	for ctx.Err() == nil && a.dials.Add(1) <= a.maxDials {
		d := net.Dialer{Timeout: time.Second}
		c, err := d.DialContext(ctx, "tcp", a.addr)
		if err == nil {
			return c
		}
		// The kernel refused the connection or dropped the handshake
		// until the dial timed out: count it, and try again a little
		// later, so a refusal does not become a busy loop.
		a.dialErrors.Add(1)
		select {
		case <-ctx.Done():
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// client runs one client of kind k, reconnecting each time it is done,
// until the attack ends.
func (a *attacker) client(ctx context.Context, k hostile.Client) {
	for {
		c := a.dial(ctx)
		if c == nil {
			return
		}
		k.Run(ctx, c)
		_ = c.Close()
	}
}

// requireLoopback refuses any target but a loopback address: this tool is
// for one's own machine.
func requireLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("address %q: only loopback IP addresses may be targeted", addr)
	}
	return nil
}
