package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// runAttack is the attacker child. It runs as many clients of each kind
// (see kinds) as its flags ask. Each slowloris connection sends a partial
// request and then a header line every 1 to 3 s; each idle connection sends
// nothing; churn loops connect and close as fast as they can; every other
// kind writes its request at once (see request) and waits for the server to
// close the connection. All of them re-open the moment the server closes
// them or has answered. Everything stops at the deadline, when standard
// input closes, or after -max-dials connections.
func runAttack(args []string) error {
	fs, f := attackFlags()
	if err := fs.Parse(args); err != nil {
		return err
	}
	n := f.clients
	if err := requireLoopback(f.addr); err != nil {
		return err
	}
	if n[kindChurn] < 0 {
		n[kindChurn] = runtime.NumCPU()
	}
	a := &attacker{addr: f.addr, maxDials: f.maxDials}
	if n[kindTLS] > 0 {
		hello, err := clientHello()
		if err != nil {
			return err
		}
		a.hello = hello
	}
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
	for k, count := range n {
		for i := 0; i < count; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a.client(ctx, kind(k))
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
	for k := range f.clients {
		fs.IntVar(&f.clients[k], kind(k).String(), 0, kinds[k].help)
	}
	fs.DurationVar(&f.duration, "duration", 30*time.Second, "stop after this long")
	fs.Int64Var(&f.maxDials, "max-dials", 20_000_000, "stop after this many connections")
	return fs, &f
}

// attackArgs is the attack child's command line.
func attackArgs(addr string, n counts, d time.Duration) []string {
	args := []string{"-role=attack", "--", "-addr", addr, "-duration", d.String()}
	for k, count := range n {
		args = append(args, "-"+kind(k).String(), fmt.Sprint(count))
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
	hello      []byte // the tls kind's ClientHello
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

// closedByServer waits until the server closes c, the deadline passes, or
// the attack ends, and reports whether the server closed it.
func closedByServer(ctx context.Context, c net.Conn, until time.Time) bool {
	if dl, ok := ctx.Deadline(); ok && dl.Before(until) {
		until = dl
	}
	_ = c.SetReadDeadline(until)
	stop := context.AfterFunc(ctx, func() { _ = c.SetReadDeadline(time.Now()) })
	defer stop()
	var buf [512]byte
	for {
		_, err := c.Read(buf[:])
		if err == nil {
			continue // an answer (a 4xx, say): keep reading to the close
		}
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
}

// noReadHold is how long a noread client leaves the answer unread: past the
// server's 2 s write timeout, so that whatever the server does with a
// client that does not read, it has done it by then.
const noReadHold = 3 * time.Second

// client runs one client of kind k until the attack ends.
func (a *attacker) client(ctx context.Context, k kind) {
	switch k {
	case kindSlowloris:
		a.slowloris(ctx)
	case kindIdle:
		a.idle(ctx)
	case kindChurn:
		a.churn(ctx)
	default:
		a.sendAndWait(ctx, k)
	}
}

// sendAndWait writes kind k's request on each connection, then waits for
// the server to close it, reading whatever it answers, and reconnects.
func (a *attacker) sendAndWait(ctx context.Context, k kind) {
	req := request(k)
	if k == kindTLS {
		req = a.hello
	}
	for {
		c := a.dial(ctx)
		if c == nil {
			return
		}
		_, err := c.Write(req)
		if err == nil && k == kindHalfClose {
			err = c.(*net.TCPConn).CloseWrite()
		}
		if err == nil && k == kindNoRead {
			// A client cannot see the close without reading: leave the
			// answer unread until the server has surely given up, then
			// wait for the close like the others.
			t := time.NewTimer(noReadHold)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
		if err == nil {
			closedByServer(ctx, c, time.Now().Add(time.Hour))
		}
		_ = c.Close()
	}
}

func (a *attacker) slowloris(ctx context.Context) {
	for {
		c := a.dial(ctx)
		if c == nil {
			return
		}
		_, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
		for i := 0; err == nil && ctx.Err() == nil; i++ {
			if closedByServer(ctx, c, time.Now().Add(time.Second+time.Duration(rand.Int63n(int64(2*time.Second))))) {
				break
			}
			_, err = fmt.Fprintf(c, "X-Slow-%d: 1\r\n", i)
		}
		_ = c.Close()
	}
}

func (a *attacker) idle(ctx context.Context) {
	for {
		c := a.dial(ctx)
		if c == nil {
			return
		}
		closedByServer(ctx, c, time.Now().Add(time.Hour))
		_ = c.Close()
	}
}

func (a *attacker) churn(ctx context.Context) {
	for {
		c := a.dial(ctx)
		if c == nil {
			return
		}
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
