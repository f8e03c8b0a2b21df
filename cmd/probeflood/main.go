// Command probeflood measures whether the kubelet keeps getting its probe
// answers while other local clients flood the health listener.
//
// It starts the server in a child process through the package's public API
// (NewServer, Listen, Serve), the attackers in a second child, and probes
// from its own process as the kubelet does: a fresh connection every
// 100 ms to /healthz and to /readyz, with a 1 s timeout. It prints one table
// row per load: probe success per endpoint, probe latency, and the server's
// peak RSS, peak goroutines, CPU (cores busy over the probing window, from
// its own rusage) and shutdown time under load.
//
// The loads (-load, comma-separated; all of them by default):
//
//	1   1,000 slowloris + 1,000 idle
//	2   load 1, server fd limit 1024
//	3   connect-and-close churn, one goroutine per core
//	4   load 1, probe writes 20 ms after its handshake
//	5   5,000 slowloris + 5,000 idle, server fd limit 1024 (report only)
//	6   2,000 OPTIONS * declaring Content-Length: 4096, the body never sent
//	7   2,000 requests with a 12 KiB header (net/http answers 431)
//	8   2,000 POST /healthz declaring Content-Length: 1099511627776 (1 TiB)
//	9   hostile mix: every kind of attacker at once, 3,000 clients + churn
//	10  1,000 slowloris + 1,000 idle, server fd limit 128
//	custom  the counts, limit, delay and bar given by flags
//
// Every load but 5 has a bar: 99.9% of probes answered on both endpoints
// (99% for load 4). Every attacker reconnects as soon as the server closes
// or answers it; -help lists the kinds, each with a flag for the custom
// load. -server plain runs a plain http.Server serving the package's
// Handler with the same timeouts instead of Serve, to compare the two.
//
//	go run ./cmd/probeflood                  # every load, 20 s each
//	go run ./cmd/probeflood -load 6 -duration 5s
//	go run ./cmd/probeflood -load 9 -server plain
//	go run ./cmd/probeflood -load custom -options 500 -slowloris 0 -idle 0
//	go run ./cmd/probeflood -soak 5m         # the hostile mix for 5 minutes
//
// -soak runs load 9's attackers for the given time while probing, stops
// them, waits 5 s, and prints the server's current RSS, goroutines and open
// descriptors before the attack, at its end and after that settle time,
// with the probes' success over the whole soak.
//
// Every connection goes to a loopback address, every loop ends by its
// deadline, and the attackers' connection count is capped.
//
// It runs on Linux only: it reads the kernel's TCP counters and the
// server's RSS and descriptors from /proc, its CPU time from getrusage, and
// sets the server's RLIMIT_NOFILE. On other systems it still compiles, so
// that the module builds everywhere, but it exits at once with a message
// saying so rather than report figures it could not measure.
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
	loads := flag.String("load", allLoadIDs(), "comma-separated loads to run (see above); custom is the one the attacker-count flags describe")
	var custom load
	for k := range custom.clients {
		def := 0
		if kind(k) == kindSlowloris || kind(k) == kindIdle {
			def = 1000
		}
		flag.IntVar(&custom.clients[k], kind(k).String(), def, "custom load: "+kinds[k].help)
	}
	flag.IntVar(&custom.serverNofile, "server-nofile", 0, "custom load: the server's file-descriptor limit (0: leave it)")
	flag.DurationVar(&custom.probeDelay, "probe-delay", 0, "custom load: how long a probe waits after its handshake to send its request")
	flag.Float64Var(&custom.bar, "bar", 0, "custom load: the share of probes that must succeed, such as 0.999 (0: report only)")
	duration := flag.Duration("duration", 20*time.Second, "how long the prober probes under each load")
	addr := flag.String("addr", "", "probe and attack this loopback address instead of starting a server (server figures are then not reported)")
	server := flag.String("server", serverHealth, "the server child: health (the package's Listen + Serve) or plain (an http.Server with the package's Handler and the same timeouts)")
	soak := flag.Duration("soak", 0, "instead of the loads, run load 9's attackers this long (at most 1h) while probing, then report the server's RSS, goroutines and descriptors before, at the end and 5 s after")
	flag.Usage = usage
	flag.Parse()
	if runtime.GOOS != "linux" {
		fmt.Fprintf(os.Stderr, "probeflood: runs on Linux only (it reads /proc and sets RLIMIT_NOFILE); this is %s\n", runtime.GOOS)
		os.Exit(1)
	}

	var err error
	switch {
	case *role == "server":
		err = runServer(flag.Args())
	case *role == "attack":
		err = runAttack(flag.Args())
	case *role != "":
		err = fmt.Errorf("unknown -role %q", *role)
	case *server != serverHealth && *server != serverPlain:
		err = fmt.Errorf("-server %q: want %s or %s", *server, serverHealth, serverPlain)
	case *soak != 0:
		err = runSoak(*soak, *server, *addr)
	default:
		err = runLoads(*loads, custom, *duration, *addr, *server)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "probeflood:", err)
		os.Exit(1)
	}
}

func usage() {
	out := flag.CommandLine.Output()
	fmt.Fprintf(out, "usage: probeflood [-load 1,...,%d,custom] [-duration 20s] [-server health|plain] [-addr 127.0.0.1:PORT] [custom load flags]\n", len(allLoads))
	fmt.Fprintf(out, "       probeflood -soak 5m [-server health|plain]\n\nloads (all of them by default):\n")
	for _, l := range allLoads {
		fmt.Fprintf(out, "  %-6d  %s\n", l.id, l.name)
	}
	fmt.Fprintf(out, "  custom  the attacker counts below, -server-nofile, -probe-delay and -bar\n\nattackers (each reconnects as soon as the server closes or answers it):\n")
	for k := range kinds {
		fmt.Fprintf(out, "  %-9s  %s\n", kinds[k].name, kinds[k].help)
	}
	fmt.Fprintf(out, "\nhostile mix (load 9 and -soak): %s\n\n", hostileMix.describe())
	flag.PrintDefaults()
}

// load is one row of the table.
type load struct {
	id           int // 0 for the custom load
	name         string
	clients      counts        // attacking clients of each kind
	serverNofile int           // the server's RLIMIT_NOFILE, soft and hard; 0 leaves it
	probeDelay   time.Duration // between the probe's handshake and its request
	bar          float64       // the share of probes that must succeed; 0 = report only
}

// hostileMix is every kind of attacker at once: load 9's, and the soak's.
var hostileMix = counts{
	kindSlowloris: 300, kindIdle: 300, kindChurn: -1,
	kindOptions: 200, kindBigHeader: 200, kindHugeBody: 200, kindSmallBody: 200, kindExpect: 200,
	kindPipeline: 200, kindHalfClose: 200, kindTLS: 200, kindH2: 200, kindNoRead: 200,
	kindExpectOther: 200, kindManyHeaders: 200,
}

var allLoads = []load{
	{id: 1, name: "1,000 slowloris + 1,000 idle", clients: counts{kindSlowloris: 1000, kindIdle: 1000}, bar: 0.999},
	{id: 2, name: "load 1, server fd limit 1024", clients: counts{kindSlowloris: 1000, kindIdle: 1000}, serverNofile: 1024, bar: 0.999},
	{id: 3, name: "connect-and-close churn, one goroutine per core", clients: counts{kindChurn: -1}, bar: 0.999},
	{id: 4, name: "load 1, probe writes 20 ms after its handshake", clients: counts{kindSlowloris: 1000, kindIdle: 1000}, probeDelay: 20 * time.Millisecond, bar: 0.99},
	{id: 5, name: "5,000 slowloris + 5,000 idle, server fd limit 1024", clients: counts{kindSlowloris: 5000, kindIdle: 5000}, serverNofile: 1024, bar: 0.999},
	{id: 6, name: "2,000 OPTIONS * declaring a 4 KiB body never sent", clients: counts{kindOptions: 2000}, bar: 0.999},
	{id: 7, name: "2,000 requests with a 12 KiB header (431)", clients: counts{kindBigHeader: 2000}, bar: 0.999},
	{id: 8, name: "2,000 POST declaring a 1 TiB body never sent", clients: counts{kindHugeBody: 2000}, bar: 0.999},
	{id: 9, name: fmt.Sprintf("hostile mix: every kind at once, %s clients + churn", thousands(hostileMix.total())), clients: hostileMix, bar: 0.999},
	{id: 10, name: "load 1, server fd limit 128", clients: counts{kindSlowloris: 1000, kindIdle: 1000}, serverNofile: 128, bar: 0.999},
}

// allLoadIDs is the default -load: every load.
func allLoadIDs() string {
	ids := make([]string, len(allLoads))
	for i, l := range allLoads {
		ids[i] = fmt.Sprint(l.id)
	}
	return strings.Join(ids, ",")
}

// selectLoads returns the loads named in spec, custom standing for the one
// the command line describes.
func selectLoads(spec string, custom load) ([]load, error) {
	var out []load
	for _, f := range strings.Split(spec, ",") {
		if strings.TrimSpace(f) == "custom" {
			custom.name = fmt.Sprintf("custom: %d slowloris + %d idle + %d churn", custom.clients[kindSlowloris], custom.clients[kindIdle], custom.clients[kindChurn])
			for k := kindChurn + 1; k < numKinds; k++ {
				if custom.clients[k] != 0 {
					custom.name += fmt.Sprintf(" + %d %s", custom.clients[k], k)
				}
			}
			custom.name += fmt.Sprintf(", server fd limit %d, probe delay %v", custom.serverNofile, custom.probeDelay)
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
