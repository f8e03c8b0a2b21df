// Command probeflood measures whether the kubelet keeps getting its probe
// answers while other local clients flood the health listener.
//
// It starts the server in a child process through the package's public API
// (NewServer, Listen, Serve), the attackers in a second child, and probes
// from its own process as the kubelet does: a fresh connection every
// 100 ms to /healthz and to /readyz, with a 1 s timeout. It prints one table
// row per load: probe success per endpoint, probe latency, and the server's
// peak RSS, peak live heap, peak goroutines, CPU (cores busy over the
// probing window, from its own rusage) and shutdown time under load.
//
// The loads are numbered rows of one table (-load, comma-separated; all of
// them by default): -loads prints it, each load with its attackers, the
// server's descriptor limit, the probe's delay and the bar, the share of
// probes that must succeed on both endpoints; docs/load.md quotes that
// output. Every attacker reconnects as soon as the server closes or answers
// it; -help lists the kinds, each with a flag for the custom load. -server
// plain runs a plain http.Server serving the package's Handler with the
// same timeouts instead of Serve, to compare the two; -server both runs
// each load against one and then the other, never at once, and prints
// both rows with health's CPU as a multiple of plain's.
//
// -cpus runs the server child under a CPU limit, as the kubelet runs a
// container with resources.limits.cpu: a CFS quota of that many cores in
// a 100 ms period, in a cgroup the command makes (cgroup v2's cpu.max or
// v1's cpu.cfs_quota_us, whichever the machine mounts, found in
// /proc/self/mountinfo), moves the server child into, and removes at the
// end, an interrupt included. Loads 15 to 17 have limits of their own.
// Making a cgroup takes root; when no cgroup can be made, the error names
// each place tried and why it failed.
//
//	go run ./cmd/probeflood                  # every load, 20 s each
//	go run ./cmd/probeflood -loads           # the table of loads
//	go run ./cmd/probeflood -load 6 -duration 5s
//	go run ./cmd/probeflood -load 9 -server plain
//	go run ./cmd/probeflood -load 1,15,16,17 -server both
//	go run ./cmd/probeflood -load 13 -cpus 0.25
//	go run ./cmd/probeflood -load custom -options 500 -slowloris 0 -idle 0
//	go run ./cmd/probeflood -soak 5m         # the hostile mix for 5 minutes
//
// -soak runs the hostile mix's attackers (load 9's) for the given time
// while probing, stops them, waits 5 s, and prints the server's current
// RSS, goroutines and open descriptors before the attack, at its end and
// after that settle time, with the probes' success over the whole soak.
//
// Every connection goes to a loopback address, every loop ends by its
// deadline, and the attackers' connection count is capped.
//
// It runs on Linux only: it reads the kernel's TCP counters and the
// server's RSS and descriptors from /proc, its CPU time from getrusage, and
// sets the server's RLIMIT_NOFILE and cgroup. On other systems it still
// compiles, so that the module builds everywhere, but it exits at once
// with a message saying so rather than report figures it could not
// measure.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/meshnode/health/internal/hostile"
)

var verbose = flag.Bool("v", false, "print why each failed probe failed, to standard error")

func main() {
	role := flag.String("role", "", "internal: server or attack, the children this command starts, with their own flags after --")
	loads := flag.String("load", allLoadIDs(), "comma-separated loads to run (see -loads); custom is the one the attacker-count flags describe")
	listLoads := flag.Bool("loads", false, "print the table of loads, as docs/load.md quotes it, and exit")
	custom := load{clients: counts{}}
	for _, k := range kinds {
		def := 0
		if k.Name == "slowloris" || k.Name == "idle" {
			def = 1000
		}
		custom.clients[k.Name] = def
		flag.Func(k.Name, fmt.Sprintf("custom load: how many %s clients (default %d): %s", k.Name, def, k.Help), func(v string) error {
			n, err := strconv.Atoi(v)
			custom.clients[k.Name] = n
			return err
		})
	}
	flag.IntVar(&custom.serverNofile, "server-nofile", 0, "custom load: the server's file-descriptor limit (0: leave it)")
	flag.DurationVar(&custom.probeDelay, "probe-delay", 0, "custom load: how long a probe waits after its handshake to send its request")
	flag.Float64Var(&custom.bar, "bar", 0, "custom load: the share of probes that must succeed, such as 0.999 (0: report only)")
	duration := flag.Duration("duration", 20*time.Second, "how long the prober probes under each load")
	addr := flag.String("addr", "", "probe and attack this loopback address instead of starting a server (server figures are then not reported)")
	server := flag.String("server", serverHealth, "the server child: health (the package's Listen + Serve), plain (an http.Server with the package's Handler and the same timeouts), or both: each load against health, then plain, in one table with health's CPU as a multiple of plain's (the run fails on health's bars only)")
	cpus := flag.Float64("cpus", 0, "run the server child under a CPU limit of this many cores, such as 0.25: a CFS quota (100 ms period) in a cgroup the command makes and removes, v2 or v1, which takes root; for every load without a limit of its own, the custom load and -soak (0: no limit)")
	soak := flag.Duration("soak", 0, "instead of the loads, run load 9's attackers this long (at most 1h) while probing, then report the server's RSS, goroutines and descriptors before, at the end and 5 s after")
	flag.Usage = usage
	flag.Parse()
	if *listLoads {
		writeLoads(os.Stdout)
		return
	}
	if runtime.GOOS != "linux" {
		fmt.Fprintf(os.Stderr, "probeflood: runs on Linux only (it reads /proc and sets RLIMIT_NOFILE); this is %s\n", runtime.GOOS)
		os.Exit(1)
	}

	err := checkCores("-cpus", *cpus, runtime.NumCPU())
	switch {
	case err != nil:
	case *role == "server":
		err = runServer(flag.Args())
	case *role == "attack":
		err = runAttack(flag.Args())
	case *role != "":
		err = fmt.Errorf("unknown -role %q", *role)
	case *server != serverHealth && *server != serverPlain && *server != serverBoth:
		err = fmt.Errorf("-server %q: want %s, %s or %s", *server, serverHealth, serverPlain, serverBoth)
	case *soak != 0:
		err = runSoak(*soak, *server, *addr, *cpus)
	default:
		err = runLoads(*loads, custom, *duration, *addr, *server, *cpus)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "probeflood:", err)
		os.Exit(1)
	}
}

func usage() {
	out := flag.CommandLine.Output()
	fmt.Fprintf(out, "usage: probeflood [-load 1,...,%d,custom] [-duration 20s] [-server health|plain|both] [-cpus 0.25] [-addr 127.0.0.1:PORT] [custom load flags]\n", len(allLoads))
	fmt.Fprintf(out, "       probeflood -soak 5m [-server health|plain] [-cpus 0.25]\n       probeflood -loads\n\nloads (all of them by default):\n\n")
	writeLoads(out)
	fmt.Fprintf(out, "\ncustom: the attacker counts below, -server-nofile, -probe-delay and -bar\n\nattackers (each reconnects as soon as the server closes or answers it):\n")
	for _, k := range kinds {
		fmt.Fprintf(out, "  %-14s  %s\n", k.Name, k.Help)
	}
	fmt.Fprintf(out, "\nhostile mix (load 9 and -soak): %s\n\n", hostileMix.describe())
	flag.PrintDefaults()
}

// writeLoads prints the table of loads, the one list of them: -loads and
// -help show it, and docs/load.md quotes it.
func writeLoads(w io.Writer) {
	fmt.Fprintln(w, tableHead("load", "what it is", "attackers", "server fd limit", "server CPU limit", "probe writes after its handshake", "bar, on both endpoints"))
	for _, l := range allLoads {
		nofile, cpus, delay := "as inherited", "none", "at once"
		if l.serverNofile > 0 {
			nofile = fmt.Sprint(l.serverNofile)
		}
		if l.cpus > 0 {
			cpus = fmt.Sprintf("%v cores", l.cpus)
		}
		if l.probeDelay > 0 {
			delay = fmt.Sprint(l.probeDelay)
		}
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | ≥ %s %% |\n", l.id, l.name, l.clients.describe(), nofile, cpus, delay, strconv.FormatFloat(100*l.bar, 'f', -1, 64))
	}
}

// load is one row of the table.
type load struct {
	id           int // 0 for the custom load
	name         string
	clients      counts        // attacking clients of each kind
	serverNofile int           // the server's RLIMIT_NOFILE, soft and hard; 0 leaves it
	probeDelay   time.Duration // between the probe's handshake and its request
	bar          float64       // the share of probes that must succeed; 0 (custom only) = report only
	// cpus is the server's CPU limit in cores, a CFS quota in a cgroup, as
	// the kubelet sets for a container's resources.limits.cpu; 0 is none.
	cpus float64
}

// hostileMix is every hostile kind at once (maxrequest, valid requests, is
// not one): load 9's, and the soak's. Each kind that waits for the server
// runs 200 clients, slowloris and idle 300; churn runs a loop per core, and
// the kinds that reset a loop each.
var hostileMix = func() counts {
	mix := counts{}
	for _, k := range hostile.Clients() {
		switch {
		case k.Name == "churn":
			mix[k.Name] = -1
		case k.Loops():
			mix[k.Name] = 1
		case k.Name == "slowloris", k.Name == "idle":
			mix[k.Name] = 300
		default:
			mix[k.Name] = 200
		}
	}
	return mix
}()

// synCookies is load 11's crowd: more silent clients than the kernel's SYN
// queue holds (net.ipv4.tcp_max_syn_backlog), so that it completes
// handshakes with SYN cookies, and those connections, probes' included,
// arrive without TCP_DEFER_ACCEPT's wait, empty.
var synCookies = counts{"idle": 8000, "churn": 8}

// allLoads is the table of loads. Loads 11 and 12 are the SYN-cookie
// case; 13 and 14 a queue of complete requests; 15 to 17 run the server
// under a CPU limit, as a node agent's DaemonSet may set one, where the
// CPU a flood costs the server is taken from its answers to the probe;
// 18 to 20 send a probe's own request line, GET /healthz, each with one
// thing a probe never sends (a body awaited, trickled or declared huge),
// alone; load 7's 12 KiB header is a GET /healthz already; 21 stops a
// peek short of the header's end with an urgent byte.
var allLoads = []load{
	{id: 1, name: "1,000 slowloris + 1,000 idle", clients: counts{"slowloris": 1000, "idle": 1000}, bar: 0.999},
	{id: 2, name: "load 1, server fd limit 1024", clients: counts{"slowloris": 1000, "idle": 1000}, serverNofile: 1024, bar: 0.999},
	{id: 3, name: "connect-and-close churn, one goroutine per core", clients: counts{"churn": -1}, bar: 0.999},
	{id: 4, name: "load 1, probe writes 20 ms after its handshake", clients: counts{"slowloris": 1000, "idle": 1000}, probeDelay: 20 * time.Millisecond, bar: 0.99},
	{id: 5, name: "5,000 slowloris + 5,000 idle, server fd limit 1024", clients: counts{"slowloris": 5000, "idle": 5000}, serverNofile: 1024, bar: 0.999},
	{id: 6, name: "2,000 OPTIONS * declaring a 4 KiB body never sent", clients: counts{"options": 2000}, bar: 0.999},
	{id: 7, name: "2,000 requests with a 12 KiB header (431)", clients: counts{"bigheader": 2000}, bar: 0.999},
	{id: 8, name: "2,000 POST declaring a 1 TiB body never sent", clients: counts{"hugebody": 2000}, bar: 0.999},
	{id: 9, name: fmt.Sprintf("hostile mix: every hostile kind at once, %s clients + loops", thousands(hostileMix.clients())), clients: hostileMix, bar: 0.999},
	{id: 10, name: "load 1, server fd limit 128", clients: counts{"slowloris": 1000, "idle": 1000}, serverNofile: 128, bar: 0.999},
	{id: 11, name: "SYN cookies: 8,000 idle + 8 churn loops, probe writes 20 ms after its handshake", clients: synCookies, probeDelay: 20 * time.Millisecond, bar: 0.999},
	{id: 12, name: "load 11, server fd limit 128", clients: synCookies, serverNofile: 128, probeDelay: 20 * time.Millisecond, bar: 0.90},
	{id: 13, name: "4,000 complete ~4 KiB requests", clients: counts{"maxrequest": 4000}, bar: 0.999},
	{id: 14, name: "6,000 complete ~4 KiB requests", clients: counts{"maxrequest": 6000}, bar: 0.97},
	{id: 15, name: "load 1, server at 0.25 cores", clients: counts{"slowloris": 1000, "idle": 1000}, cpus: 0.25, bar: 0.999},
	{id: 16, name: "load 1, server at 0.05 cores", clients: counts{"slowloris": 1000, "idle": 1000}, cpus: 0.05, bar: 0.999},
	{id: 17, name: "hostile mix (load 9), server at 0.25 cores", clients: hostileMix, cpus: 0.25, bar: 0.999},
	{id: 18, name: "2,000 GET /healthz with Expect: 100-continue, body never sent", clients: counts{"getexpect": 2000}, bar: 0.999},
	{id: 19, name: "2,000 GET /healthz with a chunked body trickled, a 1-byte chunk a second", clients: counts{"gettrickle": 2000}, bar: 0.999},
	{id: 20, name: "2,000 GET /healthz declaring a 1 TiB body never sent", clients: counts{"gethugebody": 2000}, bar: 0.999},
	{id: 21, name: "2,000 partial GET /healthz headers, each with one urgent (MSG_OOB) byte, then silent", clients: counts{"urgent": 2000}, bar: 0.999},
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
// the command line describes. A CPU limit of cpus cores (-cpus; 0 is none)
// applies to every load that has none of its own, and says so in its
// name; a load with its own limit keeps it, so that load 15 is always
// what the table says it is.
func selectLoads(spec string, custom load, cpus float64) ([]load, error) {
	var out []load
	for _, f := range strings.Split(spec, ",") {
		if strings.TrimSpace(f) == "custom" {
			if err := custom.clients.check(); err != nil {
				return nil, err
			}
			custom.name = fmt.Sprintf("custom: %s, server fd limit %d, probe delay %v", custom.clients.describe(), custom.serverNofile, custom.probeDelay)
			if cpus > 0 {
				custom.name += fmt.Sprintf(", server at %v cores", cpus)
				custom.cpus = cpus
			}
			out = append(out, custom)
			continue
		}
		found := false
		for _, l := range allLoads {
			if fmt.Sprint(l.id) == strings.TrimSpace(f) {
				if l.cpus == 0 && cpus > 0 {
					l.name += fmt.Sprintf(", server at %v cores (-cpus)", cpus)
					l.cpus = cpus
				}
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
