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

// runAttack is the attacker child. Each slowloris connection sends a partial
// request and then a header line every 1 to 3 s; each idle connection sends
// nothing; both re-open the moment the server closes them. Churn goroutines
// connect and close as fast as they can. Everything stops at the deadline,
// when standard input closes, or after -max-dials connections.
func runAttack(args []string) error {
	fs := flag.NewFlagSet("attack", flag.ContinueOnError)
	addr := fs.String("addr", "", "loopback address to attack")
	slowloris := fs.Int("slowloris", 0, "slowloris connections")
	idle := fs.Int("idle", 0, "idle connections")
	churn := fs.Int("churn", 0, "connect-and-close goroutines (-1: one per core)")
	duration := fs.Duration("duration", 30*time.Second, "stop after this long")
	maxDials := fs.Int64("max-dials", 20_000_000, "stop after this many connections")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := requireLoopback(*addr); err != nil {
		return err
	}
	if *churn < 0 {
		*churn = runtime.NumCPU()
	}
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	a := &attacker{addr: *addr, maxDials: *maxDials}
	start := time.Now()
	// The parent writes a line when its probing ends, before it stops the
	// server, and closes standard input to stop the attack. The figures
	// reported are those of the probing window: once the server is gone,
	// every connect fails, and counting those would say nothing.
	var report atomic.Value // the figures at the parent's mark
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			report.Store(fmt.Sprintf("result dials=%d seconds=%.1f dial_errors=%d", a.dials.Load(), time.Since(start).Seconds(), a.dialErrors.Load()))
		}
		cancel()
	}()

	var wg sync.WaitGroup
	spawn := func(n int, fn func(context.Context)) {
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fn(ctx)
			}()
		}
	}
	spawn(*slowloris, a.slowloris)
	spawn(*idle, a.idle)
	spawn(*churn, a.churn)
	wg.Wait()
	if report.Load() == nil {
		report.Store(fmt.Sprintf("result dials=%d seconds=%.1f dial_errors=%d", a.dials.Load(), time.Since(start).Seconds(), a.dialErrors.Load()))
	}
	fmt.Println(report.Load())
	return nil
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
