package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"
)

const (
	probeEvery   = 100 * time.Millisecond
	probeTimeout = time.Second // the kubelet's default timeoutSeconds
)

// outcome is one probe: whether it got the correct answer within the
// timeout, and how long it took.
type outcome struct {
	ok      bool
	latency time.Duration
}

// probeFor probes /healthz and /readyz on fresh connections every
// probeEvery until d has passed, as the kubelet's httpGet probe does, and
// returns the outcomes by path. A non-zero delay holds the request back
// that long after the handshake, as a busy kubelet might.
func probeFor(addr string, d, delay time.Duration) map[string][]outcome {
	client := &http.Client{
		Timeout: probeTimeout,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, network, address)
				if err != nil || delay == 0 {
					return c, err
				}
				return &delayedConn{Conn: c, until: time.Now().Add(delay)}, nil
			},
		},
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	results := map[string][]outcome{}
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		for _, path := range probePaths {
			wg.Add(1)
			go func(path string) {
				defer wg.Done()
				o := probeOnce(client, "http://"+addr+path)
				mu.Lock()
				results[path] = append(results[path], o)
				mu.Unlock()
			}(path)
		}
	}
	wg.Wait()
	return results
}

func probeOnce(client *http.Client, url string) outcome {
	start := time.Now()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("User-Agent", "kube-probe/1.31")
	resp, err := client.Do(req)
	if err != nil {
		if *verbose {
			fmt.Fprintln(os.Stderr, "probe failed:", err)
		}
		return outcome{latency: time.Since(start)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 10<<10))
	ok := err == nil && resp.StatusCode == 200 && string(body) == "ok\n"
	if !ok && *verbose {
		fmt.Fprintf(os.Stderr, "probe failed: %d %q %v\n", resp.StatusCode, body, err)
	}
	return outcome{ok: ok, latency: time.Since(start)}
}

// delayedConn holds its first write until a moment after the handshake.
type delayedConn struct {
	net.Conn
	until time.Time
	once  sync.Once
}

func (c *delayedConn) Write(p []byte) (int, error) {
	c.once.Do(func() { time.Sleep(time.Until(c.until)) })
	return c.Conn.Write(p)
}

// summary is the share of correct answers and the latency percentiles of
// all probes, failures included (a failure counts at the time it took).
func summary(os []outcome) (okShare float64, p50, p99 time.Duration) {
	if len(os) == 0 {
		return 0, 0, 0
	}
	lat := make([]time.Duration, len(os))
	ok := 0
	for i, o := range os {
		lat[i] = o.latency
		if o.ok {
			ok++
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return float64(ok) / float64(len(os)), lat[len(lat)*50/100], lat[len(lat)*99/100]
}
