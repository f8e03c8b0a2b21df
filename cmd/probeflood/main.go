// Command probeflood measures whether the kubelet keeps getting its probe
// answers while other local clients flood the health listener.
//
// It starts the server in a child process through the package's public API
// (NewServer, Listen, Serve), the attackers in a second child, and probes
// from its own process as the kubelet does: a fresh connection every
// 100 ms to /healthz and to /readyz, with a 1 s timeout. It prints one table
// row per load: probe success per endpoint, probe latency, and the server's
// peak RSS, peak goroutines and shutdown time under load.
//
//	go run ./cmd/probeflood               # loads 1 to 4 and the 5,000 + 5,000 report
//	go run ./cmd/probeflood -load 1 -duration 5s
//
// Every connection goes to a loopback address, every loop ends by its
// deadline, and the attackers' connection count is capped.
//
// It runs on Linux only: it reads the kernel's TCP counters and the
// server's peak RSS from /proc, and sets the server's RLIMIT_NOFILE. On
// other systems it still compiles, so that the module builds everywhere,
// but it exits at once with a message saying so rather than report figures
// it could not measure.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

var verbose = flag.Bool("v", false, "print why each failed probe failed, to standard error")

func main() {
	role := flag.String("role", "", "internal: server or attack, the children this command starts, with their own flags after --")
	loads := flag.String("load", "1,2,3,4,5", "comma-separated loads to run (see -help); custom is the one the next flags describe")
	var custom load
	flag.IntVar(&custom.slowloris, "slowloris", 1000, "custom load: slowloris connections")
	flag.IntVar(&custom.idle, "idle", 1000, "custom load: idle connections")
	flag.IntVar(&custom.churn, "churn", 0, "custom load: connect-and-close goroutines (-1: one per core)")
	flag.IntVar(&custom.serverNofile, "server-nofile", 0, "custom load: the server's file-descriptor limit (0: leave it)")
	flag.DurationVar(&custom.probeDelay, "probe-delay", 0, "custom load: how long a probe waits after its handshake to send its request")
	flag.Float64Var(&custom.bar, "bar", 0, "custom load: the share of probes that must succeed, such as 0.999 (0: report only)")
	duration := flag.Duration("duration", 20*time.Second, "how long the prober probes under each load")
	addr := flag.String("addr", "", "probe and attack this loopback address instead of starting a server (server figures are then not reported)")
	flag.Usage = usage
	flag.Parse()
	if runtime.GOOS != "linux" {
		fmt.Fprintf(os.Stderr, "probeflood: runs on Linux only (it reads /proc and sets RLIMIT_NOFILE); this is %s\n", runtime.GOOS)
		os.Exit(1)
	}

	var err error
	switch *role {
	case "server":
		err = runServer(flag.Args())
	case "attack":
		err = runAttack(flag.Args())
	case "":
		err = runLoads(*loads, custom, *duration, *addr)
	default:
		err = fmt.Errorf("unknown -role %q", *role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "probeflood:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintf(flag.CommandLine.Output(), "usage: probeflood [-load 1,2,3,4,5,custom] [-duration 20s] [-addr 127.0.0.1:PORT] [custom load flags]\n\nloads:\n")
	for _, l := range allLoads {
		fmt.Fprintf(flag.CommandLine.Output(), "  %d       %s\n", l.id, l.name)
	}
	fmt.Fprintf(flag.CommandLine.Output(), "  custom  -slowloris, -idle, -churn, -server-nofile, -probe-delay and -bar\n")
	fmt.Fprintln(flag.CommandLine.Output())
	flag.PrintDefaults()
}

// load is one row of the table.
type load struct {
	id           int // 0 for the custom load
	name         string
	slowloris    int
	idle         int
	churn        int           // connect-and-close goroutines
	serverNofile int           // the server's RLIMIT_NOFILE, soft and hard; 0 leaves it
	probeDelay   time.Duration // between the probe's handshake and its request
	bar          float64       // the share of probes that must succeed; 0 = report only
}

var allLoads = []load{
	{id: 1, name: "1,000 slowloris + 1,000 idle", slowloris: 1000, idle: 1000, bar: 0.999},
	{id: 2, name: "load 1, server fd limit 1024", slowloris: 1000, idle: 1000, serverNofile: 1024, bar: 0.999},
	{id: 3, name: "connect-and-close churn, one goroutine per core", churn: -1, bar: 0.999},
	{id: 4, name: "load 1, probe writes 20 ms after its handshake", slowloris: 1000, idle: 1000, probeDelay: 20 * time.Millisecond, bar: 0.99},
	{id: 5, name: "5,000 slowloris + 5,000 idle, server fd limit 1024", slowloris: 5000, idle: 5000, serverNofile: 1024},
}

// selectLoads returns the loads named in spec, custom standing for the one
// the command line describes.
func selectLoads(spec string, custom load) ([]load, error) {
	var out []load
	for _, f := range strings.Split(spec, ",") {
		if strings.TrimSpace(f) == "custom" {
			custom.name = fmt.Sprintf("custom: %d slowloris + %d idle + %d churn, server fd limit %d, probe delay %v",
				custom.slowloris, custom.idle, custom.churn, custom.serverNofile, custom.probeDelay)
			out = append(out, custom)
			continue
		}
		found := false
		for _, l := range allLoads {
			if fmt.Sprint(l.id) == strings.TrimSpace(f) {
				out = append(out, l)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("-load: no load %q (have 1 to %d, and custom)", f, len(allLoads))
		}
	}
	return out, nil
}
